package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"

	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

func strconvItoa(i int) string { return strconv.Itoa(i) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func createSourceSecret(t *testing.T, k *testenv.Kube, ns string) {
	t.Helper()
	err := k.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rancher", Namespace: ns},
		Data:       map[string][]byte{"url": []byte("https://rancher.example"), "token": []byte("token-s3cr3t")},
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func argoClient(t *testing.T, k *testenv.Kube) argoclient.Interface {
	t.Helper()
	return argoclient.NewForConfigOrDie(k.Config)
}

var getOpts = metav1.GetOptions{}

// pubOnce publishes one event on a connection of its own.
func pubOnce(t *testing.T, url string, e events.Event) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := events.NewPublisher(js, "/enforcement/test").Publish(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// waitReadyz waits until the service's /readyz at health answers 200.
func waitReadyz(t *testing.T, health string) {
	t.Helper()
	eventually(t, "/readyz is 200", func() bool {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
