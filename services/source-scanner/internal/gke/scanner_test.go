package gke

import (
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke/gkefake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

// TestScannerDegradedRemovesNothing drives the real scanner (embedded JetStream) with a GKE
// Lister: after a complete scan, each fault makes scans degraded with a clear reason in a
// SourceDegraded event, and no cluster is gone even after the grace period; when the fault
// clears, the next scan is complete and still removes nothing.
func TestScannerDegradedRemovesNothing(t *testing.T) {
	bus := scannertest.NewBus(t)
	tests := []scannertest.Fault[*gkefake.Server]{
		{Name: "permission denied", Apply: func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 403, Status: "PERMISSION_DENIED", Msg: "Required 'container.clusters.list' permission for 'projects/proj-a'."}
		}, WantReason: events.DegradedUnauthorized},
		// proj-b still answers, so the listing is partial.
		{Name: "throttled beyond the retries", Apply: func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 429, Status: "RESOURCE_EXHAUSTED", Msg: "Quota exceeded."}
		}, WantReason: events.DegradedPartial},
		{Name: "5xx in one project of two", Apply: func(f *gkefake.Server) {
			f.Fail["proj-b"] = gkefake.Error{Code: 502, Status: "UNAVAILABLE", Msg: "Bad gateway."}
		}, WantReason: events.DegradedPartial},
		{Name: "missing zones", Apply: func(f *gkefake.Server) { f.Missing["proj-a"] = []string{"europe-west1-b"} }, WantReason: events.DegradedPartial},
		{Name: "timeout", Apply: func(f *gkefake.Server) { f.Delay = 3 * time.Second }, WantReason: events.DegradedListFailed},
	}
	for i, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			f := gkefake.New(t)
			f.Add("proj-a", "europe-west1", "a", "RUNNING", nil)
			f.Add("proj-a", "europe-west1-b", "b", "RUNNING", nil)
			f.Add("proj-b", "us-central1", "c", "PROVISIONING", nil)
			l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a", "proj-b"} })
			clk := scannertest.NewClock()
			ref := events.SourceRef{Kind: events.SourceKindGKE, SecretNamespace: "enforcement", SecretName: "gke-" + string(rune('a'+i))}
			ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.GKESourceFilters([]string{"proj-a", "proj-b"}, nil))
			bus.CheckDegradedRemovesNothing(t, scanner.Source{Ref: ref, Lister: l}, clk,
				func() { f.Configure(tt.Apply) },
				func() {
					f.Configure(func(f *gkefake.Server) {
						f.Fail, f.Missing, f.Delay = map[string]gkefake.Error{}, map[string][]string{}, 0
					})
				},
				tt.WantReason)
		})
	}
}

// TestUpgradeKeepsLegacyClusterNames: GKE names are valid object names, so they stay as they
// are; were one not (the fake serves "Old_Name"), a cluster an older version announced under its
// 32-bit name keeps it after the upgrade, in its source and in another source listing the same
// cluster, and a cluster first seen after the upgrade gets the 64-bit name.
func TestUpgradeKeepsLegacyClusterNames(t *testing.T) {
	bus := scannertest.NewBus(t)
	clk := scannertest.NewClock()
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "Old_Name", "RUNNING", nil)
	f.Add("proj-a", "europe-west1", "valid-name", "RUNNING", nil)
	l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a"} })
	source := func(secret string) events.SourceRef {
		ref := events.SourceRef{Kind: events.SourceKindGKE, SecretNamespace: "enforcement", SecretName: secret}
		ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.GKESourceFilters([]string{"proj-a"}, nil))
		return ref
	}
	scan := func(ref events.SourceRef) scanner.Source {
		return scanner.Source{Ref: ref, Lister: scannertest.Identified(l, "gke:"), LegacyName: LegacyName}
	}
	key := func(name string) string { return "projects/proj-a/locations/europe-west1/clusters/" + name }
	oldName := events.LegacyObjectName("Old_Name")

	older := scanner.Source{Ref: source("gke"), Lister: scannertest.LegacyNamed(scannertest.Identified(l, "gke:"), LegacyName)}
	scannertest.ScanOK(t, bus.Scanner(clk), older)
	if got := scannertest.Names(t, bus.New(t)); got[key("Old_Name")] != oldName || got[key("valid-name")] != "valid-name" {
		t.Fatalf("the older version announced %v", got)
	}

	f.Add("proj-a", "europe-west1", "New_Name", "RUNNING", nil)
	sc := bus.Scanner(clk)
	res := scannertest.ScanOK(t, sc, scan(source("gke")))
	names := scannertest.Names(t, bus.New(t))
	if res.Appeared != 1 || res.Updated != 0 || names[key("New_Name")] != events.ObjectName("New_Name") {
		t.Fatalf("upgrade scan: %+v, names %v; want only New_Name appeared, as %s", res, names, events.ObjectName("New_Name"))
	}
	scannertest.ScanOK(t, sc, scan(source("gke-other")))
	names = scannertest.Names(t, bus.New(t))
	if names[key("Old_Name")] != oldName || names[key("New_Name")] != events.ObjectName("New_Name") || names[key("valid-name")] != "valid-name" {
		t.Fatalf("another source listing the same clusters announced %v", names)
	}
}
