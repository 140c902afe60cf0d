# The gRPC side of the same client port through another HTTP/2 stack: Debian's python3-etcd3
# (the grpc C core). Prints what it saw as one JSON object.
# Usage: python3 etcd3-grpc-check.py HOST PORT
import json
import sys

import etcd3

c = etcd3.client(host=sys.argv[1], port=int(sys.argv[2]), timeout=30)
out = {}
c.put('/py/a', 'one')
v, meta = c.get('/py/a')
out['get'] = v.decode()
out['version'] = meta.version
c.put('/py/b', 'two')
out['prefix'] = sorted(v.decode() for v, _ in c.get_prefix('/py/'))
ok, _ = c.transaction(compare=[c.transactions.value('/py/a') == 'one'], success=[c.transactions.put('/py/a', 'uno')], failure=[])
out['txn'] = ok
lease = c.lease(60)
c.put('/py/leased', 'x', lease=lease)
out['lease_keys'] = len(lease.keys)
lease.revoke()
out['leased_after_revoke'] = c.get('/py/leased')[0]
out['deleted'] = c.delete_prefix('/py/').deleted
print(json.dumps(out, sort_keys=True))
