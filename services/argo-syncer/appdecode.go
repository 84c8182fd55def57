package main

// Applications are read off the wire straight into the projection argo-syncer caches
// (cachedApplication): the informer's lists and watch events and the answers to its applies.
//
// Through the typed client, every Application the API server sends was decoded whole, managed
// fields and Argo CD's status included, and then projected (trimForCache): a quarter of
// argo-syncer's CPU during a fleet's creation went to decoding what the projection then dropped.
// Here the JSON is read once, into a wire form with only what the projection keeps; what it does
// not keep (the managed fields, the status's resources, history and conditions, the operation's
// results) is skipped without being built. A list is read one item at a time, so the whole list
// never exists decoded (BenchmarkDecodeApplication).
//
// API mode reads Argo CD's API, not the Kubernetes API: its Applications still come typed and
// are projected by trimForCache.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	synccommon "github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// wireApplication is what argo-syncer reads of an Application's JSON.
type wireApplication struct {
	Metadata wireObjectMeta         `json:"metadata"`
	Spec     argov1.ApplicationSpec `json:"spec"`
	Status   struct {
		Health         argov1.HealthStatus `json:"health"`
		Sync           argov1.SyncStatus   `json:"sync"`
		OperationState *struct {
			Phase   synccommon.OperationPhase `json:"phase"`
			Message string                    `json:"message"`
		} `json:"operationState"`
	} `json:"status"`
}

// wireObjectMeta is an object's metadata without its managed fields: the field of the same name
// here hides ObjectMeta's, and skips the value.
type wireObjectMeta struct {
	metav1.ObjectMeta
	ManagedFields skippedValue `json:"managedFields"`
}

// skippedValue reads a JSON value and keeps nothing of it.
type skippedValue struct{}

func (*skippedValue) UnmarshalJSONFrom(dec *jsontext.Decoder) error { return dec.SkipValue() }

// wireAnswer is an Application as the API server answers argo-syncer's writes of it:
// wireApplication, with what its managed fields say of argo-syncer's ownership.
type wireAnswer struct {
	wireApplication
	Metadata struct {
		wireObjectMeta
		ManagedFields fieldOwners `json:"managedFields"`
	} `json:"metadata"`
}

// fieldOwners is what argo-syncer reads of an object's managed fields.
type fieldOwners struct {
	// updatedBy: FieldManager holds some of the object's fields by an update (a create or a
	// merge patch) rather than by an apply. An apply that leaves out a field it holds that way
	// does not remove the field (writeApplication).
	updatedBy bool
}

func (f *fieldOwners) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	var entries []struct {
		Manager     string       `json:"manager"`
		Operation   string       `json:"operation"`
		Subresource string       `json:"subresource"`
		FieldsV1    skippedValue `json:"fieldsV1"`
	}
	if err := json.UnmarshalDecode(dec, &entries); err != nil {
		return err
	}
	for _, e := range entries {
		if e.Manager == FieldManager && e.Operation == string(metav1.ManagedFieldsOperationUpdate) && e.Subresource == "" {
			f.updatedBy = true
		}
	}
	return nil
}

// decodeApplication reads the next value of dec, an Application, into its projection; generation
// is the Application's metadata.generation.
func decodeApplication(dec *jsontext.Decoder) (app *cachedApplication, generation int64, err error) {
	var w wireApplication
	if err := json.UnmarshalDecode(dec, &w); err != nil {
		return nil, 0, fmt.Errorf("decode application: %w", err)
	}
	return w.project(), w.Metadata.Generation, nil
}

// readAnswer reads the API server's answer to a write of an Application into its projection, as
// decodeApplication, and whether FieldManager holds fields of it by an update (fieldOwners).
func readAnswer(data []byte) (app *cachedApplication, generation int64, updatedBy bool, err error) {
	var w wireAnswer
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, 0, false, fmt.Errorf("decode application: %w", err)
	}
	w.wireApplication.Metadata = w.Metadata.wireObjectMeta
	return w.project(), w.Metadata.Generation, w.Metadata.ManagedFields.updatedBy, nil
}

func (w *wireApplication) project() *cachedApplication {
	read := &argov1.Application{ObjectMeta: w.Metadata.ObjectMeta, Spec: w.Spec}
	read.Status.Health, read.Status.Sync = w.Status.Health, w.Status.Sync
	if op := w.Status.OperationState; op != nil {
		read.Status.OperationState = &argov1.OperationState{Phase: op.Phase, Message: op.Message}
	}
	return cacheApplication(read)
}

// cachedApplicationList is a page of Applications, projected: what applicationListWatch lists.
type cachedApplicationList struct {
	metav1.ListMeta
	Items []*cachedApplication
}

func (*cachedApplicationList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (l *cachedApplicationList) DeepCopyObject() runtime.Object {
	c := &cachedApplicationList{ListMeta: *l.DeepCopy(), Items: make([]*cachedApplication, len(l.Items))}
	for i, app := range l.Items {
		c.Items[i] = app.DeepCopyObject().(*cachedApplication)
	}
	return c
}

// decodeApplicationList reads a list of Applications, one item at a time.
func decodeApplicationList(r io.Reader) (*cachedApplicationList, error) {
	dec := jsontext.NewDecoder(r)
	list := &cachedApplicationList{}
	err := readObject(dec, func(name string) error {
		switch name {
		case "metadata":
			return json.UnmarshalDecode(dec, &list.ListMeta)
		case "items":
			return readArray(dec, func() error {
				app, _, err := decodeApplication(dec)
				list.Items = append(list.Items, app)
				return err
			})
		}
		return dec.SkipValue()
	})
	if err != nil {
		return nil, fmt.Errorf("decode application list: %w", err)
	}
	return list, nil
}

// readObject reads a JSON object of dec, calling member for each name; member reads the value.
func readObject(dec *jsontext.Decoder, member func(name string) error) error {
	if tok, err := dec.ReadToken(); err != nil {
		return err
	} else if tok.Kind() != '{' {
		return fmt.Errorf("want a JSON object, got %v", tok.Kind())
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := member(name.String()); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken() // '}', or the error that stopped the loop
	return err
}

// readArray reads a JSON array of dec (or null), calling item for each element; item reads it.
func readArray(dec *jsontext.Decoder, item func() error) error {
	tok, err := dec.ReadToken()
	switch {
	case err != nil:
		return err
	case tok.Kind() == 'n':
		return nil
	case tok.Kind() != '[':
		return fmt.Errorf("want a JSON array, got %v", tok.Kind())
	}
	for dec.PeekKind() != ']' && dec.PeekKind() != 0 {
		if err := item(); err != nil {
			return err
		}
	}
	_, err = dec.ReadToken() // ']', or the error that stopped the loop
	return err
}

// applicationListWatch lists and watches the Applications of a namespace through the REST client
// of Argo CD's API group, reading them into their projection: the ListerWatcher of argo-syncer's
// Application informer outside API mode.
type applicationListWatch struct {
	client rest.Interface
	ns     string
}

var _ cache.ListerWatcher = applicationListWatch{}

// As client-go's own informers (no context before v0.32): a watch ends with its Stop.

// get streams the answer to a GET of the namespace's Applications with opts.
func (lw applicationListWatch) get(opts metav1.ListOptions) (io.ReadCloser, error) {
	return lw.client.Get().Namespace(lw.ns).Resource("applications").
		VersionedParams(&opts, metav1.ParameterCodec).Stream(context.Background())
}

func (lw applicationListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	body, err := lw.get(opts)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return decodeApplicationList(body)
}

func (lw applicationListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	body, err := lw.get(opts)
	if err != nil {
		return nil, err
	}
	return watch.NewStreamWatcher(&applicationWatchDecoder{body: body, dec: jsontext.NewDecoder(body)},
		// As client-go reports what it cannot decode in a watch.
		apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// applicationWatchDecoder reads the events of a watch of Applications: {"type": ..., "object":
// ...} one after the other. An ERROR event's object is a metav1.Status, as client-go decodes it.
type applicationWatchDecoder struct {
	body io.ReadCloser
	dec  *jsontext.Decoder
}

func (d *applicationWatchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var (
		typ    watch.EventType
		obj    runtime.Object
		object jsontext.Value // the object when it came before the type
	)
	err := readObject(d.dec, func(name string) error {
		switch {
		case name == "type":
			return json.UnmarshalDecode(d.dec, &typ)
		case name == "object" && typ == "":
			v, err := d.dec.ReadValue()
			if err != nil {
				return err
			}
			object = v.Clone()
			return nil
		case name == "object":
			var err error
			obj, err = d.decodeObject(typ, d.dec)
			return err
		}
		return d.dec.SkipValue()
	})
	if err == nil && obj == nil && object != nil {
		obj, err = d.decodeObject(typ, jsontext.NewDecoder(bytes.NewReader(object)))
	}
	switch {
	case errors.Is(err, io.EOF) && obj == nil && typ == "":
		return "", nil, io.EOF // the server ended the watch between two events
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "", nil, io.ErrUnexpectedEOF
	case err != nil:
		return "", nil, err
	case obj == nil:
		return "", nil, fmt.Errorf("watch event %q without an object", typ)
	}
	return typ, obj, nil
}

func (d *applicationWatchDecoder) decodeObject(typ watch.EventType, dec *jsontext.Decoder) (runtime.Object, error) {
	switch typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		app, _, err := decodeApplication(dec)
		return app, err
	case watch.Error:
		status := &metav1.Status{}
		if err := json.UnmarshalDecode(dec, status); err != nil {
			return nil, fmt.Errorf("decode watch error: %w", err)
		}
		return status, nil
	}
	return nil, fmt.Errorf("watch event of unknown type %q", typ)
}

func (d *applicationWatchDecoder) Close() { d.body.Close() }

// applyApplicationJSON applies an Application (body) through the REST client of Argo CD's API
// group and returns the server's answer.
func applyApplicationJSON(ctx context.Context, client rest.Interface, ns, name string, body []byte) ([]byte, error) {
	return answer(client.Patch(types.ApplyPatchType).Namespace(ns).Resource("applications").Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)}, metav1.ParameterCodec).
		Body(body).Do(ctx))
}

// createApplicationJSON creates an Application (body) through the REST client of Argo CD's API
// group and returns the server's answer.
func createApplicationJSON(ctx context.Context, client rest.Interface, ns string, body []byte) ([]byte, error) {
	return answer(client.Post().Namespace(ns).Resource("applications").
		VersionedParams(&metav1.CreateOptions{FieldManager: FieldManager}, metav1.ParameterCodec).
		Body(body).Do(ctx))
}

// answer is the body of a request's answer, or its error: Error, not Raw's error, reads the
// server's Status (its reason and message) from the body.
func answer(result rest.Result) ([]byte, error) {
	if err := result.Error(); err != nil {
		return nil, err
	}
	body, _ := result.Raw()
	return body, nil
}
