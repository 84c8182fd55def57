package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	argoscheme "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned/scheme"
	healthlib "github.com/argoproj/gitops-engine/pkg/health"
	synccommon "github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// typedProjection is what the informer cached before Applications were read straight into their
// projection: the typed client's decoding, then trimForCache.
func typedProjection(t testing.TB, wire []byte) (*cachedApplication, int64) {
	t.Helper()
	obj, _, err := argoscheme.Codecs.UniversalDeserializer().Decode(wire, nil, &argov1.Application{})
	if err != nil {
		t.Fatal(err)
	}
	app := obj.(*argov1.Application)
	generation := app.Generation
	trimmed, err := trimForCache(app)
	if err != nil {
		t.Fatal(err)
	}
	return trimmed.(*cachedApplication), generation
}

// foreignApplication is the JSON of an Application someone else wrote, with a spec that uses
// most of what Argo CD's has (several sources, Helm values as an object, a retry policy, ignored
// differences), deleting, with a failed operation and Argo CD's full status.
func foreignApplication(t testing.TB) []byte {
	t.Helper()
	now := metav1.NewTime(time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC))
	source := argov1.ApplicationSource{RepoURL: "https://git.example/agent", Path: "charts/agent", TargetRevision: "HEAD",
		Helm: &argov1.ApplicationSourceHelm{ReleaseName: "agent", ValuesObject: &runtime.RawExtension{Raw: []byte(`{"replicas":2,"tags":["a","b"]}`)},
			Parameters: []argov1.HelmParameter{{Name: "image.tag", Value: "v1", ForceString: true}}}}
	second := argov1.ApplicationSource{RepoURL: "https://git.example/values", Ref: "values"}
	app := &argov1.Application{
		TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Application"},
		ObjectMeta: metav1.ObjectMeta{Name: "c1-agent", Namespace: "argocd", UID: "u-9", ResourceVersion: "77", Generation: 4,
			CreationTimestamp: now, DeletionTimestamp: &now, Finalizers: []string{"resources-finalizer.argocd.argoproj.io"},
			Labels:      map[string]string{"team": "platform", "cluster_name": "c1"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 300)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "argoproj.io/v1alpha1", Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}},
		},
		Spec: argov1.ApplicationSpec{Sources: argov1.ApplicationSources{source, second}, Project: "platform",
			Destination: argov1.ApplicationDestination{Server: "https://c1.example", Namespace: "monitoring"},
			SyncPolicy: &argov1.SyncPolicy{Automated: &argov1.SyncPolicyAutomated{Prune: true},
				SyncOptions: argov1.SyncOptions{"CreateNamespace=true"},
				Retry:       &argov1.RetryStrategy{Limit: 5, Backoff: &argov1.Backoff{Duration: "5s", Factor: ptr(int64(2))}}},
			IgnoreDifferences: argov1.IgnoreDifferences{{Group: "apps", Kind: "Deployment", JSONPointers: []string{"/spec/replicas"}}},
			Info:              []argov1.Info{{Name: "owner", Value: "platform"}}},
		Status: argov1.ApplicationStatus{
			Health: argov1.HealthStatus{Status: healthlib.HealthStatusDegraded, Message: "Deployment agent: 0 of 1 ready"},
			Sync: argov1.SyncStatus{Status: argov1.SyncStatusCodeOutOfSync, Revisions: []string{"abc", "def"},
				ComparedTo: argov1.ComparedTo{Sources: argov1.ApplicationSources{source, second}, Destination: argov1.ApplicationDestination{Server: "https://c1.example", Namespace: "monitoring"}}},
			Resources:  []argov1.ResourceStatus{{Kind: "Deployment", Name: "agent", Namespace: "monitoring"}},
			History:    argov1.RevisionHistories{{ID: 1, Revisions: []string{"abc", "def"}, DeployedAt: now}},
			Conditions: []argov1.ApplicationCondition{{Type: argov1.ApplicationConditionSyncError, Message: "old"}},
			OperationState: &argov1.OperationState{Phase: synccommon.OperationFailed, Message: "one or more objects failed to apply",
				SyncResult: &argov1.SyncOperationResult{Revision: "abc", Resources: argov1.ResourceResults{{Name: "agent", Message: "forbidden"}}},
				StartedAt:  now},
		},
	}
	w, err := json.Marshal(app)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Read straight off the wire, an Application is projected exactly as the typed client's decoding
// and trimForCache projected it: Enforcement's own after Argo CD synced it, someone else's with
// its whole spec, one deleting, one without a status, a bookmark's bare metadata.
func TestDecodeApplicationProjectsAsTheTypedClient(t *testing.T) {
	cases := map[string][]byte{
		"own, synced":       serverApplication(t, "c1", "agent"),
		"foreign, deleting": foreignApplication(t),
		"no status":         []byte(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"name":"a","namespace":"argocd","labels":{"app.kubernetes.io/managed-by":"enforcement"}},"spec":{"project":"p","destination":{"name":"c1"}}}`),
		"bookmark":          []byte(`{"kind":"Application","apiVersion":"argoproj.io/v1alpha1","metadata":{"resourceVersion":"1234","annotations":{"k8s.io/initial-events-end":"true"}}}`),
	}
	for name, wire := range cases {
		t.Run(name, func(t *testing.T) {
			want, wantGeneration := typedProjection(t, wire)
			got, generation, err := decodeApplication(jsontext.NewDecoder(bytes.NewReader(wire)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) || generation != wantGeneration {
				t.Errorf("projection read off the wire (generation %d):\n%+v\nstatus %+v\nwant (generation %d):\n%+v\nstatus %+v",
					generation, got, got.Status(), wantGeneration, want, want.Status())
			}
			// A write's answer is read into the same projection.
			answer, generation, _, err := readAnswer(wire)
			if err != nil || !reflect.DeepEqual(answer, want) || generation != wantGeneration {
				t.Errorf("answer read as (generation %d, %v):\n%+v\nwant (generation %d):\n%+v", generation, err, answer, wantGeneration, want)
			}
		})
	}
	// The foreign spec is there, and its status reads as Argo CD wrote it.
	app, _, _ := decodeApplication(jsontext.NewDecoder(strings.NewReader(string(foreignApplication(t)))))
	if app.Foreign == nil || len(app.Foreign.Sources) != 2 || string(app.Foreign.Sources[0].Helm.ValuesObject.Raw) != `{"replicas":2,"tags":["a","b"]}` {
		t.Errorf("foreign spec read as %+v", app.Foreign)
	}
	if st := app.Status(); st.Health != "Degraded" || st.Operation != "Failed" || st.OperationMessage != "one or more objects failed to apply" || !st.Observed {
		t.Errorf("status read as %+v", st)
	}
}

// A write's answer says whether argo-syncer's field manager holds fields of the Application by an
// update (a create, a merge patch) besides or instead of an apply; another manager's update, or
// one of a subresource, does not count.
func TestReadAnswerFindsFieldsHeldByAnUpdate(t *testing.T) {
	entry := func(manager, operation, subresource string) string {
		return fmt.Sprintf(`{"manager":%q,"operation":%q,"apiVersion":"argoproj.io/v1alpha1","time":"2026-12-07T15:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:project":{}}},"subresource":%q}`,
			manager, operation, subresource)
	}
	cases := []struct {
		name    string
		entries []string
		want    bool
	}{
		{"applied", []string{entry(FieldManager, "Apply", "")}, false},
		{"created", []string{entry(FieldManager, "Update", "")}, true},
		{"created, then applied", []string{entry(FieldManager, "Apply", ""), entry(FieldManager, "Update", "")}, true},
		{"someone else's update", []string{entry(FieldManager, "Apply", ""), entry("kubectl-edit", "Update", "")}, false},
		{"a status update", []string{entry(FieldManager, "Apply", ""), entry(FieldManager, "Update", "status")}, false},
		{"none", nil, false},
	}
	for _, c := range cases {
		wire := fmt.Sprintf(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"name":"a","namespace":"argocd","managedFields":[%s]},"spec":{"project":"p"}}`,
			strings.Join(c.entries, ","))
		app, _, updatedBy, err := readAnswer([]byte(wire))
		if err != nil || app.Name != "a" || app.Project.String() != "p" || updatedBy != c.want {
			t.Errorf("%s: read %+v, held by an update %v (%v); want %v", c.name, app, updatedBy, err, c.want)
		}
	}
	if _, _, _, err := readAnswer([]byte(`{"metadata":{"name":"a","managedFields":{"manager":"x"}}}`)); err == nil {
		t.Error("managed fields that are not a list read without an error")
	}
}

// An Application whose JSON is not one gets an error that says so; a wrong type is not read as
// an empty Application.
func TestDecodeApplicationRejectsWhatIsNotOne(t *testing.T) {
	for _, wire := range []string{`[1]`, `{"metadata":{"name":7}}`, `{"metadata":{"name":"a"}`, `{"spec":{"project":["p"]}}`} {
		_, _, err := decodeApplication(jsontext.NewDecoder(strings.NewReader(wire)))
		if err == nil || !strings.Contains(err.Error(), "decode application") {
			t.Errorf("%s: error %v, want one that says the application could not be decoded", wire, err)
		}
	}
}

// A list is read one item at a time into projections, with its resource version and continue
// token (the pager's); members it does not know are skipped; "items": null is an empty page.
func TestDecodeApplicationList(t *testing.T) {
	a, b := serverApplication(t, "c1", "agent"), foreignApplication(t)
	wire := fmt.Sprintf(`{"apiVersion":"argoproj.io/v1alpha1","kind":"ApplicationList","metadata":{"resourceVersion":"900","continue":"next-page","remainingItemCount":3},"items":[%s,%s],"extra":{"a":[1,2]}}`, a, b)
	list, err := decodeApplicationList(strings.NewReader(wire))
	if err != nil {
		t.Fatal(err)
	}
	wantA, _ := typedProjection(t, a)
	wantB, _ := typedProjection(t, b)
	if list.ResourceVersion != "900" || list.Continue != "next-page" || list.RemainingItemCount == nil || *list.RemainingItemCount != 3 ||
		len(list.Items) != 2 || !reflect.DeepEqual(list.Items[0], wantA) || !reflect.DeepEqual(list.Items[1], wantB) {
		t.Errorf("list read as %+v with %d items", list.ListMeta, len(list.Items))
	}
	if cp := list.DeepCopyObject().(*cachedApplicationList); !reflect.DeepEqual(cp, list) || cp.Items[0] == list.Items[0] {
		t.Error("a deep copy of the list is not equal to it, or shares its items")
	}

	empty, err := decodeApplicationList(strings.NewReader(`{"metadata":{"resourceVersion":"5"},"items":null}`))
	if err != nil || len(empty.Items) != 0 || empty.ResourceVersion != "5" {
		t.Errorf("empty list read as %+v, %v", empty, err)
	}

	for _, bad := range []string{`[]`, `{"items":{}}`, `{"items":[` + string(a), `{"items":[{"metadata":3}]}`} {
		if _, err := decodeApplicationList(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "decode application list") {
			t.Errorf("%.40s: error %v, want one that says the list could not be decoded", bad, err)
		}
	}
}

// A watch's events are read one after the other: their types, their Applications projected, an
// ERROR event's Status as such, an event whose object comes before its type. The stream's end
// between two events ends the watch (io.EOF, which StreamWatcher takes as a normal close); an
// end inside an event is io.ErrUnexpectedEOF; an event of an unknown type or without an object
// is an error that names it.
func TestApplicationWatchDecoder(t *testing.T) {
	app := serverApplication(t, "c1", "agent")
	want, _ := typedProjection(t, app)
	stream := fmt.Sprintf(`{"type":"ADDED","object":%s}
{"type":"MODIFIED","object":%s}
{"object":%s,"type":"DELETED"}
{"type":"BOOKMARK","object":{"kind":"Application","apiVersion":"argoproj.io/v1alpha1","metadata":{"resourceVersion":"99"}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (50)","reason":"Expired","code":410}}
`, app, app, app)
	d := &applicationWatchDecoder{body: io.NopCloser(nil), dec: jsontext.NewDecoder(strings.NewReader(stream))}
	for _, wantType := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted} {
		typ, obj, err := d.Decode()
		if err != nil || typ != wantType || !reflect.DeepEqual(obj, want) {
			t.Fatalf("event %s: got %s %+v, %v", wantType, typ, obj, err)
		}
	}
	typ, obj, err := d.Decode()
	if bookmark, ok := obj.(*cachedApplication); err != nil || typ != watch.Bookmark || !ok || bookmark.GetResourceVersion() != "99" {
		t.Errorf("bookmark: got %s %+v, %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if status, ok := obj.(*metav1.Status); err != nil || typ != watch.Error || !ok || status.Code != 410 || status.Reason != metav1.StatusReasonExpired {
		t.Errorf("error event: got %s %+v, %v", typ, obj, err)
	}
	if _, _, err := d.Decode(); err != io.EOF { //nolint:errorlint // StreamWatcher compares with ==, so must the test
		t.Errorf("at the end of the stream: %v, want io.EOF", err)
	}

	for stream, wantErr := range map[string]string{
		`{"type":"ADDED","object":` + string(app[:len(app)/2]): io.ErrUnexpectedEOF.Error(),
		`{"type":"RESIZED","object":{}}`:                       `unknown type "RESIZED"`,
		`{"type":"ADDED"}`:                                     `"ADDED" without an object`,
		`{"type":"ADDED","object":{"metadata":[]}}`:            "decode application",
	} {
		d := &applicationWatchDecoder{body: io.NopCloser(nil), dec: jsontext.NewDecoder(strings.NewReader(stream))}
		_, _, err := d.Decode()
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%.50s: error %v, want %q", stream, err, wantErr)
		}
		if wantErr == io.ErrUnexpectedEOF.Error() && err != io.ErrUnexpectedEOF { //nolint:errorlint // as above
			t.Errorf("a stream cut inside an event: %v, want io.ErrUnexpectedEOF itself (StreamWatcher compares)", err)
		}
	}
}

// BenchmarkDecodeApplication compares the two ways an Application the API server sends reaches
// argo-syncer's cache: decoded whole by the typed client and then projected, or read straight
// into its projection. Run it with
//
//	go test -run '^$' -bench DecodeApplication -benchmem
func BenchmarkDecodeApplication(b *testing.B) {
	wire := serverApplication(b, "cluster-001", "enforcement-1")
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			typedProjection(b, wire)
		}
	})
	b.Run("projected", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeApplication(jsontext.NewDecoder(bytes.NewReader(wire))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
