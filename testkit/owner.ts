// Which node owns the other end of a loopback TCP connection.
//
// A proxy sees an accepted socket's remote port, nothing else; every node dials from
// 127.0.0.1. The kernel knows more: /proc/net/tcp lists the client-side socket (local port =
// that remote port, remote port = the proxy's) with its inode, and /proc/<pid>/fd of the
// process holding it links to `socket:[inode]`. A node's components are all children of its
// supervisor, so "owned by node n" = held by a process in the tree of n's supervisor. This works
// for any component that dials (peer streams, forwarded writes, archiver uploads) without
// asking the node anything, and needs no privileges: the harness started these processes.
import { readFileSync, readlinkSync } from 'node:fs';
import { procEntries, processTree } from './proc.js';

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

function holds(pid: number, link: string): boolean {
  for (const fd of procEntries(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === link) return true;
    } catch {
      // closed meanwhile
    }
  }
  return false;
}

/**
 * Which of `roots` (supervisor pids) has, in its process tree, the client side of a connection
 * from 127.0.0.1:`remotePort` to our port `localPort`; undefined when none does (not a node's
 * socket, or it closed already).
 */
export function owningTree(remotePort: number, localPort: number, roots: readonly number[]): number | undefined {
  const inode = socketInode(remotePort, localPort);
  if (inode === undefined) return undefined;
  const link = `socket:[${inode}]`;
  return roots.find((root) => processTree(root).some((pid) => holds(pid, link)));
}
