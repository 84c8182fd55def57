package testenv_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// A stream, its message and a durable consumer written before Restart are there afterwards, on
// the same URL: the store directory and the port are kept.
func TestNATSRestartKeepsDurableState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := testenv.StartNATS(t)
	url := srv.URL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("URL = %q, want nats://127.0.0.1:<port>", url)
	}

	nc, js := connect(t, url)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "AUDIT", Subjects: []string{"audit.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "audit.one", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "reader", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	srv.Restart(t)
	if srv.URL() != url {
		t.Fatalf("URL after restart = %q, want %q", srv.URL(), url)
	}

	_, js = connect(t, url)
	cons, err := js.Consumer(ctx, "AUDIT", "reader")
	if err != nil {
		t.Fatalf("durable consumer lost on restart: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for msg := range batch.Messages() {
		got = append(got, string(msg.Data()))
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0] != "kept" {
		t.Fatalf("messages after restart = %q, want [kept]", got)
	}
}

// After Shutdown nothing listens on the URL any more, and a second Shutdown is harmless.
func TestNATSShutdown(t *testing.T) {
	srv := testenv.StartNATS(t)
	connect(t, srv.URL())
	srv.Shutdown()
	srv.Shutdown()
	if srv.Server() != nil {
		t.Fatal("Server() after Shutdown is not nil")
	}
	if _, err := nats.Connect(srv.URL(), nats.NoReconnect(), nats.Timeout(time.Second)); err == nil {
		t.Fatal("connected to a server that was shut down")
	}
}

// WithServerOptions reaches the server, and survives Restart.
func TestNATSWithServerOptions(t *testing.T) {
	const maxPayload = 4096
	srv := testenv.StartNATS(t,
		testenv.WithServerOptions(func(o *server.Options) { o.MaxPayload = maxPayload }),
		testenv.WithNATSLogs(t),
	)
	nc, _ := connect(t, srv.URL())
	if got := nc.MaxPayload(); got != maxPayload {
		t.Fatalf("MaxPayload = %d, want %d", got, maxPayload)
	}
	srv.Restart(t)
	nc, _ = connect(t, srv.URL())
	if got := nc.MaxPayload(); got != maxPayload {
		t.Fatalf("MaxPayload after restart = %d, want %d", got, maxPayload)
	}
}

// The standalone binary (images, separate processes) is the same version as the embedded server
// (tests, local mode), and serves JetStream.
func TestNATSServerBinary(t *testing.T) {
	bin, err := testenv.NATSServerBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	if want := "v" + server.VERSION; !strings.Contains(string(out), want) {
		t.Fatalf("%s --version = %q, want the embedded server's %s (align tools/nats-server)", bin, out, want)
	}

	proc := testenv.StartNATSProcess(t)
	nc, err := nats.Connect(proc.URL(), nats.NoReconnect())
	if err != nil {
		t.Fatalf("connect to nats-server process: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("JetStream not enabled in the nats-server process: %v", err)
	}
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// A 3-node cluster keeps an R3 stream writable while one node is killed, and the restarted node
// rejoins with every message.
func TestNATSClusterSurvivesALostNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := testenv.StartNATSCluster(t, 3)
	js := c.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// Each attempt waits for its acknowledgement 2 s at most: a publish sent just as its node dies
	// gets no answer, and waiting on ctx would spend the test's whole minute on it. A message id
	// makes the stream store a retried message once when only its acknowledgement was lost.
	sent := 0
	publish := func(n int) {
		t.Helper()
		for range n {
			sent++
			id := strconv.Itoa(sent)
			testenv.Eventually(t, 20*time.Second, func() error {
				attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := js.Publish(attempt, "r3.m", []byte(id), jetstream.WithMsgID(id))
				return err
			})
		}
	}
	publish(10)
	c.Kill(0)
	publish(10) // the two others still make a quorum
	c.Restart(0)
	publish(10)
	testenv.Eventually(t, 20*time.Second, func() error {
		nc, err := nats.Connect(c.NodeURL(0))
		if err != nil {
			return err
		}
		defer nc.Close()
		njs, _ := jetstream.New(nc)
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := njs.Stream(attempt, "R3")
		if err != nil {
			return err
		}
		info, err := s.Info(attempt)
		if err != nil {
			return err
		}
		if info.State.Msgs != 30 || info.Config.Replicas != 3 {
			return fmt.Errorf("stream has %d messages, %d replicas; want 30, 3", info.State.Msgs, info.Config.Replicas)
		}
		return nil
	})
}
