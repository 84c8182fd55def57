package events

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const mib = 1 << 20

// streamConfig reads a stream's configuration as the server has it.
func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("read stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

// TestApplyNeverLowersLimits: an operator raises the stream's and a bucket's limits by hand;
// a service that starts with smaller ones (the defaults, or a smaller STREAM_MAX_BYTES) keeps
// the operator's, a bigger configured cap raises the stream's, and a stream without a cap gets
// none. Before the guard every start applied the configured values over the operator's.
func TestApplyNeverLowersLimits(t *testing.T) {
	ctx := context.Background()
	_, js := connect(t, startNATS(t, ""), TopologyOptions{MaxBytes: 64 * mib})
	if got := streamConfig(t, js, StreamName).MaxBytes; got != 64*mib {
		t.Fatalf("new stream MaxBytes %d, want the configured %d", got, 64*mib)
	}

	// The operator's edits: a bigger cap, a longer age, a message cap; a bigger, longer-lived
	// inventory with more history.
	stream := streamConfig(t, js, StreamName)
	stream.MaxBytes, stream.MaxAge, stream.MaxMsgs = 512*mib, 90*24*time.Hour, 5_000_000
	if _, err := js.UpdateStream(ctx, stream); err != nil {
		t.Fatal(err)
	}
	inventory := streamConfig(t, js, bucketStream(BucketInventory))
	inventory.MaxBytes, inventory.MaxAge, inventory.MaxMsgsPerSubject = 256*mib, 48*time.Hour, 5
	if _, err := js.UpdateStream(ctx, inventory); err != nil {
		t.Fatal(err)
	}

	if err := DefaultTopology(TopologyOptions{MaxBytes: 64 * mib}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	got := streamConfig(t, js, StreamName)
	if got.MaxBytes != 512*mib || got.MaxAge != 90*24*time.Hour || got.MaxMsgs != 5_000_000 {
		t.Errorf("stream after apply: MaxBytes %d, MaxAge %s, MaxMsgs %d; want the operator's 512 MiB, 2160h, 5000000",
			got.MaxBytes, got.MaxAge, got.MaxMsgs)
	}
	gotInv := streamConfig(t, js, bucketStream(BucketInventory))
	if gotInv.MaxBytes != 256*mib || gotInv.MaxAge != 48*time.Hour || gotInv.MaxMsgsPerSubject != 5 {
		t.Errorf("inventory after apply: MaxBytes %d, TTL %s, history %d; want the operator's 256 MiB, 48h, 5",
			gotInv.MaxBytes, gotInv.MaxAge, gotInv.MaxMsgsPerSubject)
	}

	// A bigger configured cap raises the stream's.
	if err := DefaultTopology(TopologyOptions{MaxBytes: 1024 * mib}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(t, js, StreamName).MaxBytes; got != 1024*mib {
		t.Errorf("stream MaxBytes after a bigger configured cap %d, want %d", got, 1024*mib)
	}

	// A stream without a cap keeps having none.
	_, js2 := connect(t, startNATS(t, ""), TopologyOptions{})
	if err := DefaultTopology(TopologyOptions{MaxBytes: 64 * mib}).Apply(ctx, js2); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(t, js2, StreamName).MaxBytes; got > 0 {
		t.Errorf("uncapped stream got a cap of %d bytes: a cap on an existing stream is the operator's edit", got)
	}
}

// startNATSCluster runs three in-process nats-servers with JetStream, routed to each other as
// one cluster, and returns a JetStream client connected to all three once the cluster answers
// JetStream requests (it has elected its meta leader), and the servers by name (n1, n2, n3).
func startNATSCluster(t *testing.T) (jetstream.JetStream, map[string]*server.Server) {
	t.Helper()
	const size = 3
	routePorts := freePorts(t, size)
	var routes []*url.URL
	for _, port := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", port)})
	}
	var urls []string
	servers := map[string]*server.Server{}
	for i := range size {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "enforcement", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		servers[fmt.Sprintf("n%d", i+1)] = s
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server did not start")
		}
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return js, servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("the NATS cluster does not answer JetStream requests: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePorts returns n distinct TCP ports of 127.0.0.1 that were free a moment ago. Every probe
// stays open until all are picked: a probe closed early lets the kernel hand its port out again.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// TestApplyNeverLowersReplicas: on a 3-node cluster, a stream and buckets created with three
// replicas (the charts' STREAM_REPLICAS) keep them when a service starts with the default of
// one, and its consumers get the stream's three; STREAM_REPLICAS=3 raises an R1 installation.
// Before the guard the default turned the operator's R3 stream back into R1.
func TestApplyNeverLowersReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := startNATSCluster(t)
	if err := DefaultTopology(TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(t, js, StreamName).Replicas; got != 1 {
		t.Fatalf("stream replicas %d, want the default 1", got)
	}
	if err := DefaultTopology(TopologyOptions{Replicas: 3}).Apply(ctx, js); err != nil {
		t.Fatalf("raise to 3 replicas: %v", err)
	}
	checkReplicas(t, js, 3)

	if err := DefaultTopology(TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	checkReplicas(t, js, 3)
}

// TestReplicatedBucketsAreReadFromTheirLeader: the bucket streams of a replicated topology
// answer no direct gets (any replica may answer those, one behind with "not found" for a key
// just written), whether Apply created them, raised them from one replica, or found them as
// CreateOrUpdateKeyValue (an earlier version) left them; and applying again never turns direct
// gets back on. A single-replica bucket keeps them: its one replica is its leader.
func TestReplicatedBucketsAreReadFromTheirLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := startNATSCluster(t)
	topo := DefaultTopology(TopologyOptions{})
	checkDirect := func(stage string, want bool) {
		t.Helper()
		for _, b := range topo.Buckets {
			if got := streamConfig(t, js, bucketStream(b.Bucket)).AllowDirect; got != want {
				t.Errorf("%s: bucket %s allows direct gets: %v, want %v", stage, b.Bucket, got, want)
			}
		}
	}
	if err := topo.Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	checkDirect("one replica", true)
	if err := DefaultTopology(TopologyOptions{Replicas: 3}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	checkDirect("raised to three replicas", false)
	for _, b := range topo.Buckets { // as an earlier version applied them
		b.Replicas = 3
		if _, err := js.CreateOrUpdateKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	checkDirect("applied by CreateOrUpdateKeyValue", true)
	for range 2 {
		if err := DefaultTopology(TopologyOptions{}).Apply(ctx, js); err != nil {
			t.Fatal(err)
		}
		checkDirect("applied again", false)
	}
	checkReplicas(t, js, 3)
}

// checkReplicas fails unless the stream, every bucket and every shared consumer have want
// replicas.
func checkReplicas(t *testing.T, js jetstream.JetStream, want int) {
	t.Helper()
	topo := DefaultTopology(TopologyOptions{})
	names := []string{StreamName}
	for _, b := range topo.Buckets {
		names = append(names, bucketStream(b.Bucket))
	}
	for _, name := range names {
		if got := streamConfig(t, js, name).Replicas; got != want {
			t.Errorf("stream %s has %d replicas, want %d", name, got, want)
		}
	}
	for _, c := range topo.Consumers {
		cons, err := js.Consumer(context.Background(), StreamName, c.Durable)
		if err != nil {
			t.Fatal(err)
		}
		if got := cons.CachedInfo().Config.Replicas; got != want {
			t.Errorf("consumer %s has %d replicas, want %d", c.Durable, got, want)
		}
	}
}

// TestConsumerKeepsReceivingAfterALeadershipChange: on a 3-node cluster with an R3 stream, the
// node that leads the consumer is lost while the consumer runs; events published afterwards
// are still handled. Before, the client sent no new pull request after the leadership change
// and the consumer stalled until the service restarted.
func TestConsumerKeepsReceivingAfterALeadershipChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, servers := startNATSCluster(t)
	if err := DefaultTopology(TopologyOptions{Replicas: 3}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	consume(t, js, rec.handle, ConsumerOptions{Name: ConsumerRuleEngine})
	pub := NewPublisher(js, "/test")
	publishRetrying := func(prefix string) {
		for i := range 5 {
			for {
				_, err := pub.Publish(ctx, appeared(fmt.Sprintf("%s-%d", prefix, i), 1))
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	publishRetrying("before")
	rec.waitFor(t, 5)
	cons, err := js.Consumer(ctx, StreamName, ConsumerRuleEngine)
	if err != nil {
		t.Fatal(err)
	}
	leader := cons.CachedInfo().Cluster.Leader
	servers[leader].Shutdown()
	t.Logf("shut down %s, the consumer's leader", leader)
	publishRetrying("after")
	rec.waitFor(t, 5)
}

// TestApplyAgainUpdatesNoBucket: applying the topology the stream and buckets already have sends no update
// request. Every service applies it at every start, and concurrent updates of one stream, even
// to the same configuration, are what the embedded server's race detector caught.
func TestApplyAgainUpdatesNoBucket(t *testing.T) {
	nc, js := connect(t, startNATS(t, ""), TopologyOptions{})
	updates, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE.*")
	if err != nil {
		t.Fatal(err)
	}
	if err := DefaultTopology(TopologyOptions{}).Apply(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := updates.NextMsg(500 * time.Millisecond)
		if err != nil {
			break
		}
		t.Errorf("applying the same topology again updated a stream: %s", m.Subject)
	}
}
