// Which process group owns the other end of a loopback TCP connection.
//
// A proxy sees an accepted socket's remote port, nothing else; every node dials from
// 127.0.0.1. The kernel knows more: /proc/net/tcp lists the client-side socket (local port =
// that remote port, remote port = the proxy's) with its inode, and /proc/<pid>/fd of the
// process holding it links to `socket:[inode]`. A node's components all live in the process
// group of its supervisor (`kvs run` is started detached; the supervisor's children are not),
// so "owned by node n" = held by a process whose pgid is node n's supervisor pid. This works for
// any component that dials (peer streams, forwarded writes, archiver uploads) without asking
// the node anything, and needs no privileges: the harness started these processes itself.
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

/** inode of the loopback socket 127.0.0.1:localPort → 127.0.0.1:remotePort, from /proc/net/tcp{,6}. */
function socketInode(localPort: number, remotePort: number): string | undefined {
  const hex = (p: number) => p.toString(16).toUpperCase().padStart(4, '0');
  const local = `:${hex(localPort)}`;
  const remote = `:${hex(remotePort)}`;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      if (f.length > 9 && f[1]!.endsWith(local) && f[2]!.endsWith(remote) && f[9] !== '0') return f[9];
    }
  }
  return undefined;
}

/** pgid of a process (field 5 of /proc/<pid>/stat, after the parenthesised name). */
function pgidOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
  } catch {
    return undefined;
  }
}

function holds(pid: number, link: string): boolean {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === link) return true;
    } catch {
      // closed meanwhile
    }
  }
  return false;
}

/**
 * The process group (one of `groups`) holding the client side of a connection from
 * 127.0.0.1:`remotePort` to our port `localPort`; undefined when none does (not a node's socket,
 * or it closed already).
 */
export function owningGroup(remotePort: number, localPort: number, groups: readonly number[]): number | undefined {
  const inode = socketInode(remotePort, localPort);
  if (inode === undefined || groups.length === 0) return undefined;
  const link = `socket:[${inode}]`;
  const wanted = new Set(groups);
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    const pgid = pgidOf(pid);
    if (pgid !== undefined && wanted.has(pgid) && holds(pid, link)) return pgid;
  }
  return undefined;
}
