# What an application using OpenStack's etcd3gw (Debian's python3-etcd3gw, which speaks etcd's
# JSON gateway) does, run against one endpoint; prints one JSON object of what it saw, with the
# server-chosen ids left out, so that etcd's and kvs's answers compare equal.
# Usage: python3 etcd3gw-check.py HOST PORT [https CA]
import json
import sys
import threading

from etcd3gw.client import Etcd3Client
from etcd3gw.lock import Lock

host, port = sys.argv[1], int(sys.argv[2])
kw = {}
if len(sys.argv) > 3:
    kw = {'protocol': sys.argv[3], 'ca_cert': sys.argv[4]}
# Debian's etcd3gw 2.0 defaults to /v3alpha/, which etcd 3.4 does not serve.
c = Etcd3Client(host=host, port=port, api_path='/v3/', timeout=30, **kw)
out = {}

out['status_version_major'] = c.status()['version'].split('.')[0]
out['members'] = len(c.members())
out['put'] = c.put('/app/a', 'one')
out['create_again'] = c.create('/app/a', 'two')
out['create_new'] = c.create('/app/b', 'two')
out['get'] = c.get('/app/a')
meta = c.get('/app/a', metadata=True)
out['get_meta'] = [[v, sorted(m.keys())] for v, m in meta]
out['get_missing'] = c.get('/app/none')
out['prefix'] = sorted(v for v, _ in c.get_prefix('/app/'))
out['replace_ok'] = c.replace('/app/a', 'one', 'uno')
out['replace_stale'] = c.replace('/app/a', 'one', 'eins')
out['after_replace'] = c.get('/app/a')

lease = c.lease(ttl=60)
out['lease_ttl_ok'] = 0 < lease.ttl() <= 60
c.put('/app/leased', 'x', lease=lease)
out['lease_keys'] = lease.keys()
out['lease_refresh_ok'] = 0 < lease.refresh() <= 60
out['lease_revoke'] = lease.revoke()
out['leased_after_revoke'] = c.get('/app/leased')

lock = Lock('app-lock', ttl=30, client=c)
out['lock_acquire'] = lock.acquire()
out['lock_is_acquired'] = lock.is_acquired()
other = Lock('app-lock', ttl=30, client=c)
out['lock_other_acquire'] = other.acquire()
out['lock_release'] = lock.release()
out['lock_other_after'] = other.acquire()
other.release()

# A watch sees a put made after it started (the stream of /v3/watch).
seen = []
got = threading.Event()
def on_event(event):
    seen.append({'type': event.get('type', 'PUT'), 'key': event['kv']['key'], 'value': event['kv'].get('value')})
    got.set()
events, cancel = c.watch('/app/watched')
def reader():
    for e in events:
        on_event(e)
        break
t = threading.Thread(target=reader, daemon=True)
t.start()
import time
# The watch is created before the put: wait until the server has answered its creation, which
# etcd3gw does not expose; a put repeated until the watcher reports is what an application does.
for _ in range(100):
    c.put('/app/watched', 'w')
    if got.wait(0.1):
        break
cancel()
out['watch'] = seen[:1]

out['delete'] = c.delete('/app/a')
out['delete_missing'] = c.delete('/app/a')
out['delete_prefix'] = c.delete_prefix('/app/')
out['empty_after'] = c.get_prefix('/app/')
print(json.dumps(out, sort_keys=True, default=lambda b: b.decode() if isinstance(b, bytes) else repr(b)))
