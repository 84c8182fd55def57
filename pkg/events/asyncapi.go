package events

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// AsyncAPI returns the AsyncAPI 3.0 document of the contract: one channel and one message per
// event type, with the subject's parameters and the payload's JSON schema, one send operation
// per type and one receive operation per consumer the catalog routes the type to (tagged with
// the consumer's name, e.g. "rule-engine-receives-cluster-appeared"). It is generated from
// the catalog and the Go types, which stay the single source of truth; asyncapi.yaml in this
// package is its committed copy and a test keeps the two equal (UPDATE_ASYNCAPI=1 rewrites it).
func AsyncAPI() ([]byte, error) {
	channels := map[string]any{}
	operations := map[string]any{}
	messages := map[string]any{}
	for _, d := range catalog {
		name := strings.TrimSuffix(strings.TrimPrefix(d.Type, "io.enforcement."), ".v1")
		key := strings.ReplaceAll(name, ".", "-")
		params := map[string]any{}
		for _, t := range d.Subject {
			if isParam(t) {
				params[strings.Trim(t, "{}")] = map[string]any{
					"description": "Key token, escaped with EscapeToken ('.' becomes %2E).",
				}
			}
		}
		messages[key] = map[string]any{
			"name":        d.Type,
			"summary":     d.Summary,
			"contentType": contentJSON,
			"headers":     ceHeadersSchema(d.Type),
			"payload":     schemaOf(reflect.TypeOf(d.new()).Elem()),
		}
		ch := map[string]any{
			"address":  strings.Join(d.Subject, "."),
			"messages": map[string]any{key: map[string]any{"$ref": "#/components/messages/" + key}},
		}
		if len(params) > 0 {
			ch["parameters"] = params
		}
		channels[key] = ch
		operations["publish-"+key] = map[string]any{
			"action":  "send",
			"channel": map[string]any{"$ref": "#/channels/" + key},
			"summary": d.Summary,
		}
		for _, c := range d.Consumers {
			operations[c+"-receives-"+key] = map[string]any{
				"action":      "receive",
				"channel":     map[string]any{"$ref": "#/channels/" + key},
				"summary":     d.Summary,
				"description": receiveDescription(c, d),
				"tags":        []any{map[string]any{"name": c}},
			}
		}
	}
	doc := map[string]any{
		"asyncapi": "3.0.0",
		"info": map[string]any{
			"title":   "Enforcement events",
			"version": "v1",
			"description": "Every event Enforcement publishes, and which service receives it, as CloudEvents 1.0 " +
				"in binary mode over NATS JetStream (stream " + StreamName + "). Generated from pkg/events; do not edit.",
		},
		"defaultContentType": contentJSON,
		"channels":           channels,
		"operations":         operations,
		"components":         map[string]any{"messages": messages},
	}
	return yaml.Marshal(doc)
}

// receiveDescription says which durable consumer receives the type, with its filter subject.
func receiveDescription(consumer string, d descriptor) string {
	if consumer == ConsumerClaimWriter {
		return "Received by policy-watcher's claim writer on each managed cluster: durable consumer " +
			ConsumerClaimWriter + "-{cluster}, filter " + strings.Join(d.Subject, ".") + " with its own cluster."
	}
	return "Received by the durable consumer " + consumer + ", filter " + filterOf(d.Subject, nil) + "."
}

func ceHeadersSchema(eventType string) map[string]any {
	str := map[string]any{"type": "string"}
	return map[string]any{
		"type":     "object",
		"required": []string{HeaderSpecVersion, HeaderID, HeaderSource, HeaderType, "Nats-Msg-Id"},
		"properties": map[string]any{
			HeaderSpecVersion: map[string]any{"type": "string", "const": specVersion},
			HeaderID:          map[string]any{"type": "string", "description": "Deterministic event id; equals Nats-Msg-Id."},
			HeaderSource:      str,
			HeaderType:        map[string]any{"type": "string", "const": eventType},
			HeaderSubject:     map[string]any{"type": "string", "description": "Ordering key."},
			HeaderTime:        map[string]any{"type": "string", "format": "date-time"},
			"Nats-Msg-Id":     str,
		},
	}
}

var timeType = reflect.TypeOf(time.Time{})

// schemaOf derives a JSON schema from a Go type through its json tags. It covers the kinds the
// event payloads use and panics on any other, so a new kind cannot slip into the contract
// undocumented.
func schemaOf(t reflect.Type) map[string]any {
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return map[string]any{"type": "object", "additionalProperties": true}
		}
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" || name == "-" {
				panic(fmt.Sprintf("events: field %s.%s has no json name", t.Name(), f.Name))
			}
			props[name] = schemaOf(f.Type)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	panic(fmt.Sprintf("events: no schema for kind %s", t.Kind()))
}
