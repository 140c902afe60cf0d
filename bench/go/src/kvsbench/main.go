// kvsbench: the benchmark's load generator on etcd's own Go client (clientv3 of etcd 3.4,
// `--client go`; see docs/benchmarks.md#etcds-go-client-as-the-load-generator). It does what
// bench/worker.ts does, in Go: the main
// process (bench/go-client.ts) starts it, writes one JSON request per line on its stdin and
// reads one JSON reply per line from its stdout; it exits when its stdin closes.
//
//	→ {"type":"preload","endpoint":..,"from":..,"to":..,"clients":..,"batch":..,"valueBytes":..}
//	← {"type":"preloaded","keys":n}
//	→ {"type":"run","op":"put|get|mixed|range","endpoints":[..],"clientIds":[..],"opts":{..},
//	   "startAt":ms,"measureAt":ms,"endAt":ms,"auth":{"user":..,"password":..}}
//	← {"type":"result","latencies":"<base64 of float64 little-endian ms>","bytes":..,"errors":..}
//	← {"type":"failed","message":..}   (either request)
//
// The ops are bench/workloads' own (keys and values as bench/keys.ts makes them): put (Put of
// a random key under kvs-bench/put/), get (linearizable Range of one random preloaded key,
// the first response checked to hold it), mixed (50 % get, 50 % put of a preloaded key) and
// range (Range of 1,000 consecutive preloaded keys, the first response checked). Each client
// has its own clientv3.Client (its own gRPC connection) and runs one request after another;
// the latency of every request that starts in the measured window is recorded.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	pb "go.etcd.io/etcd/etcdserver/etcdserverpb"
	"google.golang.org/grpc"
)

// As bench/keys.ts: 64-byte keys kvs-bench/<area>/<zero-padded index>.
const (
	keyBytes   = 64
	rootPrefix = "kvs-bench/"
	dataArea   = "data"
	putArea    = "put"
	// bench/workloads/range.ts
	rangeKeys = 1000
	// testkit/kv-client.ts: each request's deadline.
	requestTimeout = 30 * time.Second
	connectTimeout = 10 * time.Second
)

func key(area string, i int) string {
	p := rootPrefix + area + "/"
	s := fmt.Sprint(i)
	return p + strings.Repeat("0", keyBytes-len(p)-len(s)) + s
}

type options struct {
	PreloadKeys int  `json:"preloadKeys"`
	ValueBytes  int  `json:"valueBytes"`
	Quick       bool `json:"quick"`
}

type credentials struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

type request struct {
	Type string `json:"type"`
	// preload
	Endpoint   string `json:"endpoint"`
	From       int    `json:"from"`
	To         int    `json:"to"`
	Clients    int    `json:"clients"`
	Batch      int    `json:"batch"`
	ValueBytes int    `json:"valueBytes"`
	// run
	Op        string       `json:"op"`
	Workload  string       `json:"workload"`
	Endpoints []string     `json:"endpoints"`
	ClientIDs []int        `json:"clientIds"`
	Opts      options      `json:"opts"`
	StartAt   float64      `json:"startAt"`
	MeasureAt float64      `json:"measureAt"`
	EndAt     float64      `json:"endAt"`
	Auth      *credentials `json:"auth"`
}

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func send(msg map[string]interface{}) {
	out.Lock()
	defer out.Unlock()
	if err := out.enc.Encode(msg); err != nil {
		os.Exit(1) // the main process is gone
	}
}

func connect(endpoint string, auth *credentials) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: connectTimeout,
		// Block until the connection is up, as the Node clients' connect() does.
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
	}
	if auth != nil {
		// clientv3 logs in (Auth.Authenticate) in New, sends the token in the `token` metadata
		// of every request and logs in again when a request is refused with an invalid token.
		cfg.Username, cfg.Password = auth.User, auth.Password
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %v", endpoint, err)
	}
	return c, nil
}

// eachClient runs f(i, clients[i]) for every client, each in a goroutine of its own, and waits for them all.
func eachClient(clients []*clientv3.Client, f func(i int, c *clientv3.Client)) {
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func(i int, c *clientv3.Client) {
			defer wg.Done()
			f(i, c)
		}(i, c)
	}
	wg.Wait()
}

func connectAll(endpoints []string, ids []int, auth *credentials) ([]*clientv3.Client, error) {
	clients := make([]*clientv3.Client, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func(i, id int) {
			defer wg.Done()
			clients[i], errs[i] = connect(endpoints[id%len(endpoints)], auth)
		}(i, id)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			closeAll(clients)
			return nil, err
		}
	}
	return clients, nil
}

func closeAll(clients []*clientv3.Client) {
	for _, c := range clients {
		if c != nil {
			c.Close()
		}
	}
}

func randomValue(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return string(b)
}

// preload: keys [from, to) of the data set, in Txns of `batch` puts, `clients` concurrent clients.
func preload(req *request) error {
	ids := make([]int, req.Clients)
	for i := range ids {
		ids[i] = i
	}
	clients, err := connectAll([]string{req.Endpoint}, ids, nil)
	if err != nil {
		return err
	}
	defer closeAll(clients)
	var mu sync.Mutex
	next := req.From
	errs := make([]error, len(clients))
	eachClient(clients, func(i int, c *clientv3.Client) {
		v := randomValue(req.ValueBytes)
		for {
			mu.Lock()
			from := next
			next = min(req.To, from+req.Batch)
			to := next
			mu.Unlock()
			if from >= to {
				return
			}
			ops := make([]clientv3.Op, 0, to-from)
			for k := from; k < to; k++ {
				ops = append(ops, clientv3.OpPut(key(dataArea, k), v))
			}
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			_, err := c.Txn(ctx).Then(ops...).Commit()
			cancel()
			if err != nil {
				errs[i] = err
				return
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("preload: %v", err)
		}
	}
	send(map[string]interface{}{"type": "preloaded", "keys": req.To - req.From})
	return nil
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// One request of a workload; returns the encoded size of the response (as the Node clients
// count the response bytes).
type op func(ctx context.Context) (int, error)

func get(c *clientv3.Client, k string, opts ...clientv3.OpOption) (*pb.RangeResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	res, err := c.Get(ctx, k, opts...)
	if err != nil {
		return nil, err
	}
	return (*pb.RangeResponse)(res), nil
}

func put(c *clientv3.Client, k, v string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	res, err := c.Put(ctx, k, v)
	if err != nil {
		return 0, err
	}
	return (*pb.PutResponse)(res).Size(), nil
}

// expect wraps a Range so that its first response is checked to hold n key-values
// (bench/workload.ts checkFirst + expectKvs).
func expect(n int, rangeOp func() (*pb.RangeResponse, error)) func() (int, error) {
	checked := false
	return func() (int, error) {
		res, err := rangeOp()
		if err != nil {
			return 0, err
		}
		if !checked {
			checked = true
			if len(res.Kvs) != n {
				return 0, fmt.Errorf("expected %d key-values in the Range response, got %d", n, len(res.Kvs))
			}
		}
		return res.Size(), nil
	}
}

func makeOp(name string, c *clientv3.Client, o options, rnd *rand.Rand) (func() (int, error), error) {
	value := randomValue(o.ValueBytes)
	switch name {
	case "put":
		return func() (int, error) { return put(c, key(putArea, rnd.Intn(o.PreloadKeys)), value) }, nil
	case "get":
		// Linearizable, clientv3's default (no WithSerializable).
		return expect(1, func() (*pb.RangeResponse, error) { return get(c, key(dataArea, rnd.Intn(o.PreloadKeys))) }), nil
	case "mixed":
		return func() (int, error) {
			k := key(dataArea, rnd.Intn(o.PreloadKeys))
			if rnd.Float64() < 0.5 {
				res, err := get(c, k)
				if err != nil {
					return 0, err
				}
				return res.Size(), nil
			}
			return put(c, k, value)
		}, nil
	case "range":
		n := min(rangeKeys, o.PreloadKeys)
		return expect(n, func() (*pb.RangeResponse, error) {
			i := rnd.Intn(o.PreloadKeys - n + 1)
			return get(c, key(dataArea, i), clientv3.WithRange(key(dataArea, i+n)))
		}), nil
	}
	return nil, fmt.Errorf("the Go load generator has no op '%s'", name)
}

type clientResult struct {
	latencies  []float64
	bytes      int
	errors     int
	firstError string
}

func run(req *request) error {
	// Epoch ms → instants on the monotonic clock.
	now := time.Now()
	at := func(ms float64) time.Time {
		return now.Add(time.Duration((ms - float64(now.UnixNano())/1e6) * float64(time.Millisecond)))
	}
	startAt, measureFrom, end := at(req.StartAt), at(req.MeasureAt), at(req.EndAt)
	if _, err := makeOp(req.Op, nil, req.Opts, nil); err != nil {
		return err
	}
	if req.Opts.PreloadKeys <= 0 {
		return errors.New("opts.preloadKeys must be positive")
	}
	clients, err := connectAll(req.Endpoints, req.ClientIDs, req.Auth)
	if err != nil {
		return err
	}
	defer closeAll(clients)
	if req.Auth != nil && time.Now().After(measureFrom) {
		return fmt.Errorf("%s: the clients' logins lasted into the measured window", req.Workload)
	}
	time.Sleep(time.Until(startAt))
	results := make([]clientResult, len(clients))
	eachClient(clients, func(i int, c *clientv3.Client) {
		r := &results[i]
		r.latencies = make([]float64, 0, 1<<16)
		rnd := rand.New(rand.NewSource(time.Now().UnixNano() + int64(req.ClientIDs[i])))
		do, _ := makeOp(req.Op, c, req.Opts, rnd)
		for {
			t0 := time.Now()
			if !t0.Before(end) {
				return
			}
			n, err := do()
			if err == nil {
				if !t0.Before(measureFrom) {
					r.latencies = append(r.latencies, float64(time.Since(t0))/float64(time.Millisecond))
					r.bytes += n
				}
				continue
			}
			if !t0.Before(measureFrom) {
				r.errors++
			}
			if r.firstError == "" {
				r.firstError = err.Error()
			}
			time.Sleep(10 * time.Millisecond) // a failing server must not turn this into a busy loop
		}
	})
	total := 0
	for _, r := range results {
		total += len(r.latencies)
	}
	buf := make([]byte, 0, 8*total)
	var b8 [8]byte
	bytes, errs, firstError := 0, 0, ""
	for _, r := range results {
		for _, l := range r.latencies {
			binary.LittleEndian.PutUint64(b8[:], math.Float64bits(l))
			buf = append(buf, b8[:]...)
		}
		bytes += r.bytes
		errs += r.errors
		if firstError == "" {
			firstError = r.firstError
		}
	}
	msg := map[string]interface{}{
		"type":      "result",
		"latencies": base64.StdEncoding.EncodeToString(buf),
		"bytes":     bytes,
		"errors":    errs,
	}
	if firstError != "" {
		msg["firstError"] = firstError
	}
	send(msg)
	return nil
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<24)
	send(map[string]interface{}{"type": "ready"})
	for in.Scan() {
		req := &request{}
		if err := json.Unmarshal(in.Bytes(), req); err != nil {
			send(map[string]interface{}{"type": "failed", "message": fmt.Sprintf("bad request: %v", err)})
			continue
		}
		go func() {
			var err error
			switch req.Type {
			case "preload":
				err = preload(req)
			case "run":
				err = run(req)
			default:
				err = errors.New("unknown request type " + req.Type)
			}
			if err != nil {
				send(map[string]interface{}{"type": "failed", "message": err.Error()})
			}
		}()
	}
	// stdin closed: the main process is done with us (or gone).
	os.Exit(0)
}
