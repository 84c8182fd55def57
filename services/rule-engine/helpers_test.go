package main

import (
	"github.com/enforcement-io/enforcement/pkg/events"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

type apiextensionsJSON = apiextensionsv1.JSON

func raw(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }

type clusterForTest struct{ events.Cluster }
