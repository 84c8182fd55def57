package main

import (
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsURL is NATS_URL, or nats.DefaultURL when it is unset.
func natsURL(getenv func(string) string) string {
	return valueOr(getenv("NATS_URL"), nats.DefaultURL)
}

// connectNATS connects to url as the user NATS_USER and NATS_PASSWORD (or NATS_CREDS) name, with
// opts added. It fails on inconsistent credential variables and when the server cannot be
// reached.
func connectNATS(url string, getenv func(string) string, opts ...nats.Option) (*nats.Conn, error) {
	auth, err := service.NATSAuthFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(auth, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	return nc, nil
}

// connectJetStream connects to NATS_URL as connectNATS does and returns the connection, which
// the caller closes, and its JetStream context.
func connectJetStream(getenv func(string) string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := connectNATS(natsURL(getenv), getenv)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}
