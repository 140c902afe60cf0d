/** The systems the benchmark compares. */
export type System = 'kvs' | 'etcd';
