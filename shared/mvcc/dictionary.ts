// The shared dictionary that LZ4 compresses `history` records against (lmdb-js `compression`).
//
// A history record is one small KeyValue (a key, a value of a few hundred bytes): too small for
// LZ4 to find repeats within it. Compressed against a dictionary of what such records share, it
// shrinks by about half when the values are Kubernetes-style JSON (docs/perf/layout-size.md).
// So the dictionary is the vocabulary of Kubernetes objects and their keys: field names,
// common kinds and API groups, label keys, the shape of timestamps. Values that share
// none of it (random bytes, protobuf) compress little or not at all; they cost the attempt.
//
// A database keeps the dictionary it was created with in its `meta` table (schema.ts) and is
// always read with that one, so this text may change for new databases without touching old
// ones. lmdb-js uses the dictionary's length rounded down to a multiple of 8 bytes.
export const HISTORY_DICTIONARY = Buffer.from(
  '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"","namespace":"default","uid":"",' +
    '"resourceVersion":"","generation":1,"creationTimestamp":"2026-01-01T00:00:00Z","deletionTimestamp":null,' +
    '"labels":{"app":"","app.kubernetes.io/name":"","app.kubernetes.io/instance":"","app.kubernetes.io/component":"",' +
    '"app.kubernetes.io/managed-by":"","app.kubernetes.io/part-of":""},' +
    '"annotations":{"kubectl.kubernetes.io/last-applied-configuration":""},' +
    '"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"","uid":"","controller":true,"blockOwnerDeletion":true}],' +
    '"finalizers":[],"managedFields":[{"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"v1",' +
    '"time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{}}},"f:data":{},' +
    '"f:spec":{},"f:status":{}}}]},"data":{},"spec":{"replicas":1,"selector":{"matchLabels":{}},"template":{"metadata":{},' +
    '"spec":{"containers":[{"name":"","image":"","ports":[{"containerPort":80,"protocol":"TCP"}],"resources":{},"env":[],' +
    '"volumeMounts":[]}],"restartPolicy":"Always","serviceAccountName":"default","nodeName":""}}},' +
    '"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"","reason":"",' +
    '"message":""}]},"type":"Opaque","Secret","Service","Pod","Deployment","Lease","Endpoints","EndpointSlice","Event",' +
    '"Node","ServiceAccount","Namespace","coordination.k8s.io/v1","holderIdentity","leaseDurationSeconds","acquireTime",' +
    '"renewTime","leaseTransitions","/registry/"}',
);

/** Records of at least this many bytes are compressed (smaller ones gain too little). */
export const COMPRESS_ABOVE = 64;
