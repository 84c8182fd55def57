package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// holdWrite holds the write requests whose path, or for a create the path of the object it
// creates, ends in suffix until release is closed, and closes held when the first one arrives.
type holdWrite struct {
	next    http.RoundTripper
	suffix  string
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

// newHarnessHolding is a harness whose Syncer's writes (Argo CD objects and cluster Secrets) to
// paths ending in suffix wait until the returned holdWrite is released.
func newHarnessHolding(t *testing.T, suffix string) (*harness, *holdWrite) {
	hold := &holdWrite{suffix: suffix, held: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, func(h *harness, _ *SyncerOptions) {
		cfg := rest.CopyConfig(h.log.wrap(testenv.SharedKube(t).Config))
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { hold.next = rt; return hold })
		h.syncerArgo = argoclient.NewForConfigOrDie(cfg)
		h.syncerKube = kubernetes.NewForConfigOrDie(cfg)
	})
	return h, hold
}

func (w *holdWrite) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && (strings.HasSuffix(r.URL.Path, w.suffix) || strings.HasSuffix(createdPath(r), w.suffix)) {
		w.once.Do(func() { close(w.held) })
		<-w.release
	}
	return w.next.RoundTrip(r)
}

// createdPath is the path of the object a create (r) creates, its collection's path and its
// name; "" for another request.
func createdPath(r *http.Request) string {
	if r.Method != http.MethodPost || r.GetBody == nil {
		return ""
	}
	body, err := r.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	var obj struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if json.NewDecoder(body).Decode(&obj) != nil || obj.Metadata.Name == "" {
		return ""
	}
	return r.URL.Path + "/" + obj.Metadata.Name
}

// waitHeld waits until the first held write arrives. It fails the test if done (the operation
// expected to make the write) ends first, or if 30 s pass; what names that write.
func (w *holdWrite) waitHeld(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case <-w.held:
	case err := <-done:
		t.Fatalf("the operation ended before %s: %v", what, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never came", what)
	}
}

// TestInstallsOfOneClusterRunSideBySide: while one Application of a cluster is being written,
// another install of the same cluster completes (a new cluster's Applications, one a rule, are
// written side by side), and an uninstall of the cluster waits until the write is done, so an
// unregistration never removes the project an Application being written relies on.
func TestInstallsOfOneClusterRunSideBySide(t *testing.T) {
	h, hold := newHarnessHolding(t, "/applications/fleet-slow")
	ctx := context.Background()
	slow := h.installIntent("rule-a", "fleet", "slow")
	fast := h.installIntent("rule-b", "fleet", "fast")
	slowDone := make(chan error, 1)
	go func() { _, err := h.syncer.Install(ctx, slow, true); slowDone <- err }()
	hold.waitHeld(t, slowDone, "the slow install's Application write")

	fastDone := make(chan error, 1)
	go func() { _, err := h.syncer.Install(ctx, fast, true); fastDone <- err }()
	select {
	case err := <-fastDone:
		if err != nil {
			t.Fatalf("fast install: %v", err)
		}
	case <-time.After(30 * time.Second):
		close(hold.release)
		t.Fatal("the second install of the cluster waited for the first one's Application write")
	}
	if h.app("fleet-fast") == nil {
		t.Fatal("fleet-fast was not written")
	}

	uninstallDone := make(chan error, 1)
	go func() {
		_, err := h.syncer.Uninstall(ctx, uninstallIntent(fast, events.UninstallRuleDeleted))
		uninstallDone <- err
	}()
	select {
	case err := <-uninstallDone:
		close(hold.release)
		t.Fatalf("the uninstall ran while an install of its cluster was writing (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(hold.release)
	if err := <-slowDone; err != nil {
		t.Fatalf("slow install: %v", err)
	}
	if err := <-uninstallDone; err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	// The uninstall removed its own Application only: the cluster keeps its project and Secret
	// for the one written meanwhile.
	eventually(t, "fleet-fast deleted", func() bool { return h.app("fleet-fast") == nil })
	if h.app("fleet-slow") == nil || h.project("fleet") == nil || h.secret("cluster-fleet") == nil {
		t.Fatalf("fleet-slow, its project or the cluster Secret is gone: app %v", h.app("fleet-slow") != nil)
	}
	if p := h.project("fleet"); len(p.Spec.SourceRepos) != 2 {
		t.Errorf("project repos %v, want both rules'", p.Spec.SourceRepos)
	}
}

// TestNewClusterRegistersWhileItsProjectIsWritten: a new cluster's Secret and AppProject are
// written side by side. While the Secret's creation is held, the project is written, and the
// Application waits for both.
func TestNewClusterRegistersWhileItsProjectIsWritten(t *testing.T) {
	h, hold := newHarnessHolding(t, "/secrets")
	in := h.installIntent("baseline", "fresh", "agent")
	done := make(chan error, 1)
	go func() { _, err := h.syncer.Install(context.Background(), in, true); done <- err }()
	hold.waitHeld(t, done, "the cluster Secret's creation")
	projectWritten := false
	for deadline := time.Now().Add(30 * time.Second); !projectWritten && time.Now().Before(deadline); {
		projectWritten = h.project("fresh") != nil
		time.Sleep(10 * time.Millisecond)
	}
	if h.app("fresh-agent") != nil || h.secret("cluster-fresh") != nil {
		t.Error("the Application or the Secret was written while the Secret's creation was held")
	}
	close(hold.release)
	if err := <-done; err != nil {
		t.Fatalf("install: %v", err)
	}
	if !projectWritten {
		t.Fatal("the AppProject was not written while the cluster Secret was being created")
	}
	if h.secret("cluster-fresh") == nil || h.app("fresh-agent") == nil {
		t.Fatal("the cluster Secret or the Application is missing after the install")
	}
}

// TestOneApplicationNameOneWriterAtATime: two rules install the same package on one cluster at
// once; the Application is the first rule's and the second's install fails as not owned.
func TestOneApplicationNameOneWriterAtATime(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	a := h.installIntent("rule-a", "twin", "agent")
	b := h.installIntent("rule-b", "twin", "agent")
	errs := make(chan error, 2)
	for _, in := range []*events.InstallIntent{a, b} {
		go func() { _, err := h.syncer.Install(ctx, in, true); errs <- err }()
	}
	var failed int
	for range 2 {
		if err := <-errs; err != nil {
			var f *failure
			if !errorsAs(err, &f) || f.reason != ReasonNotOwned {
				t.Fatalf("install: %v, want a NotOwned failure", err)
			}
			failed++
		}
	}
	app := h.app("twin-agent")
	if failed != 1 || app == nil {
		t.Fatalf("%d installs failed, Application %v; want exactly one failure and the Application", failed, app != nil)
	}
	if rule := app.Annotations[AnnotationRule]; rule != a.Rule.String() && rule != b.Rule.String() {
		t.Errorf("Application of rule %q", rule)
	}
}

// TestWaitingInstallsShareOneProjectWrite: while the first install of a new cluster writes its
// AppProject, four more installs of the cluster queue up; the next project write allows all
// four repositories, and the project is written twice in all, not five times.
func TestWaitingInstallsShareOneProjectWrite(t *testing.T) {
	h, hold := newHarnessHolding(t, "/appprojects/burst")
	ctx := context.Background()
	mark := h.log.mark()
	done := make(chan error, 5)
	install := func(i int) {
		_, err := h.syncer.Install(ctx, h.installIntent("rule-"+itoa(i), "burst", "pkg-"+itoa(i)), true)
		done <- err
	}
	go install(0)
	hold.waitHeld(t, done, "the first install's AppProject write")
	for i := 1; i < 5; i++ {
		go install(i)
	}
	eventually(t, "five installs queued", func() bool { return len(h.syncer.repos.queued("burst", "")) == 5 })
	close(hold.release)
	for range 5 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if p := h.project("burst"); len(p.Spec.SourceRepos) != 5 {
		t.Fatalf("project repos %v, want 5", p.Spec.SourceRepos)
	}
	if n := projectWrites(h.log.since(mark)); n != 2 {
		t.Errorf("%d AppProject writes, want 2", n)
	}
	if len(h.syncer.repos.queued("burst", "")) != 0 {
		t.Errorf("repositories still queued: %v", h.syncer.repos.queued("burst", ""))
	}
}

// TestProjectReposMakeOneProjectWrite: the intents of a new cluster carry every rule's repository
// (events.InstallIntent.ProjectRepos), so the first install writes the AppProject with all of them
// and the others, one after the other, write no project.
func TestProjectReposMakeOneProjectWrite(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	var intents []*events.InstallIntent
	var repos []string
	for i := range 3 {
		in := h.installIntent("rule-"+itoa(i), "fresh", "pkg-"+itoa(i))
		intents = append(intents, in)
		repos = append(repos, in.Enforcement.Repo)
	}
	mark := h.log.mark()
	for _, in := range intents {
		in.ProjectRepos = repos
		if _, err := h.syncer.Install(ctx, in, true); err != nil {
			t.Fatal(err)
		}
	}
	if p := h.project("fresh"); !slices.Equal(p.Spec.SourceRepos, repos) {
		t.Fatalf("project repos %v, want %v", p.Spec.SourceRepos, repos)
	}
	if n := projectWrites(h.log.since(mark)); n != 1 {
		t.Errorf("%d AppProject writes, want 1", n)
	}
}

// projectWrites counts the AppProject writes among reqs.
func projectWrites(reqs []request) int {
	n := 0
	for _, r := range writes(reqs) {
		if strings.Contains(r.Path, "/appprojects") { // a create posts to the collection
			n++
		}
	}
	return n
}
