package eks

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

// TestScannerDegradedRemovesNothing drives the real scanner (embedded JetStream) with an EKS
// Lister: after a complete scan, each fault makes scans degraded with a clear reason in a
// SourceDegraded event, and no cluster is gone even after the grace period; when the fault
// clears, the next scan is complete and still removes nothing.
func TestScannerDegradedRemovesNothing(t *testing.T) {
	bus := scannertest.NewBus(t)
	tests := []scannertest.Fault[*eksfake.Server]{
		{Name: "access denied", Apply: func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 403, ErrType: "AccessDeniedException", Message: "not authorized to perform: eks:ListClusters"}
		}, WantReason: events.DegradedUnauthorized},
		{Name: "throttled beyond the retries", Apply: func(f *eksfake.Server) { f.Throttle["ListClusters"] = 1000 }, WantReason: events.DegradedListFailed},
		{Name: "one region fails", Apply: func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 500, ErrType: "ServerException", Message: "internal", Region: "us-east-1"}
		}, WantReason: events.DegradedPartial},
		// Only the CREATING cluster (us-east-1) is described again, so one region of two fails.
		{Name: "5xx on describe", Apply: func(f *eksfake.Server) {
			f.Fail["DescribeCluster"] = eksfake.Error{Status: 500, ErrType: "ServerException", Message: "internal"}
		}, WantReason: events.DegradedPartial},
		{Name: "timeout", Apply: func(f *eksfake.Server) { f.Delay = 3 * time.Second }, WantReason: events.DegradedListFailed},
	}
	for i, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			f := eksfake.New(t)
			f.Add("eu-west-1", "a", "ACTIVE", nil)
			f.Add("eu-west-1", "b", "ACTIVE", nil)
			f.Add("us-east-1", "c", "CREATING", nil)
			l, _, clk := newTestLister(f, []string{"eu-west-1", "us-east-1"}, nil)
			ref := events.SourceRef{Kind: events.SourceKindEKS, SecretNamespace: "enforcement", SecretName: "eks-" + string(rune('a'+i))}
			ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.EKSSourceFilters([]string{"eu-west-1", "us-east-1"}))
			bus.CheckDegradedRemovesNothing(t, scanner.Source{Ref: ref, Lister: l}, clk,
				func() { f.Configure(tt.Apply) },
				func() {
					f.Configure(func(f *eksfake.Server) { f.Fail, f.Throttle, f.Delay = map[string]eksfake.Error{}, map[string]int{}, 0 })
				},
				tt.WantReason)
		})
	}
}

// Cluster names through the real scanner and the EKS fake. legacyProd is the name every version
// before 64-bit name suffixes gave Prod_Cluster.1 (events.LegacyObjectName), to the digit.
const legacyProd = "prod-cluster-1-e227441d"

func prodARN(region string) string {
	return "arn:aws:eks:" + region + ":111122223333:cluster/Prod_Cluster.1"
}

func newARN(region, name string) string {
	return "arn:aws:eks:" + region + ":111122223333:cluster/" + name
}

// eksSource is the source of an eks rule with Secret secret and regions.
func eksSource(secret string, regions ...string) events.SourceRef {
	ref := events.SourceRef{Kind: events.SourceKindEKS, SecretNamespace: "enforcement", SecretName: secret}
	ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.EKSSourceFilters(regions))
	return ref
}

// eksScan is a source as the service scans it: identities stamped, legacy names kept.
func eksScan(ref events.SourceRef, l scanner.Lister) scanner.Source {
	return scanner.Source{Ref: ref, Lister: scannertest.Identified(l, "eks:"), LegacyName: LegacyName}
}

// olderVersionScan is the scan of a version before 64-bit name suffixes: it leaves the
// inventory holding each cluster under its 32-bit name.
func olderVersionScan(t *testing.T, bus *scannertest.Bus, clk *scannertest.Clock, ref events.SourceRef, l scanner.Lister) {
	t.Helper()
	src := scanner.Source{Ref: ref, Lister: scannertest.LegacyNamed(scannertest.Identified(l, "eks:"), LegacyName)}
	scannertest.ScanOK(t, bus.Scanner(clk), src)
	if got := scannertest.Names(t, bus.New(t))[prodARN("us-east-1")]; got != legacyProd {
		t.Fatalf("the older version announced Prod_Cluster.1 as %q, want %s", got, legacyProd)
	}
}

// checkNewName fails unless a cluster first seen by this version was announced under the 64-bit
// name: events.ObjectName, ending in 16 hex digits of the EKS name's SHA-256.
func checkNewName(t *testing.T, names map[string]string, arn, eksName string) {
	t.Helper()
	sum := sha256.Sum256([]byte(eksName))
	got := names[arn]
	if got != events.ObjectName(eksName) || !strings.HasSuffix(got, "-"+hex.EncodeToString(sum[:8])) {
		t.Errorf("new cluster %s announced as %q, want the 64-bit name %s", eksName, got, events.ObjectName(eksName))
	}
}

// TestUpgradeKeepsLegacyClusterNames: a cluster an older version announced under its 32-bit name
// keeps it after the upgrade (no update, no other name: its Argo CD objects are named after it),
// a valid name stays as it is, and a cluster first seen after the upgrade gets the 64-bit name.
func TestUpgradeKeepsLegacyClusterNames(t *testing.T) {
	bus := scannertest.NewBus(t)
	f := eksfake.New(t)
	f.Add("us-east-1", "Prod_Cluster.1", "ACTIVE", nil)
	f.Add("us-east-1", "plain", "ACTIVE", nil)
	l, _, clk := newTestLister(f, []string{"us-east-1"}, nil)
	ref := eksSource("eks", "us-east-1")
	olderVersionScan(t, bus, clk, ref, l)

	f.Add("us-east-1", "New_Cluster.2", "ACTIVE", nil)
	sc := bus.Scanner(clk)
	res := scannertest.ScanOK(t, sc, eksScan(ref, l))
	names := scannertest.Names(t, bus.New(t))
	if res.Appeared != 1 || res.Updated != 0 || len(names) != 1 {
		t.Fatalf("upgrade scan: %d appeared, %d updated (%v); want New_Cluster.2 appeared and nothing updated", res.Appeared, res.Updated, names)
	}
	checkNewName(t, names, newARN("us-east-1", "New_Cluster.2"), "New_Cluster.2")

	clk.Add(11 * time.Minute) // past the re-describe interval: every cluster converted afresh
	res = scannertest.ScanOK(t, sc, eksScan(ref, l))
	if res.Appeared+res.Updated+res.Gone != 0 {
		t.Fatalf("steady scan after the upgrade announced %+v (%v)", res, scannertest.Names(t, bus.New(t)))
	}
}

// TestCrafted32BitCollisionsGetDistinctNames: two EKS names whose 32-bit names collide
// (eventstest.ClusterCollidingA and B, valid EKS names) get distinct names when both are new,
// and a cluster crafted to collide with one an older version named keeps nothing of its name:
// it gets its own 64-bit name, so neither can take the other's Argo CD objects.
func TestCrafted32BitCollisionsGetDistinctNames(t *testing.T) {
	a, b := eventstest.ClusterCollidingA, eventstest.ClusterCollidingB
	if events.LegacyObjectName(a) != events.LegacyObjectName(b) {
		t.Fatalf("%s and %s do not collide under 32 bits", a, b)
	}
	t.Run("both new", func(t *testing.T) {
		bus := scannertest.NewBus(t)
		f := eksfake.New(t)
		f.Add("eu-west-1", a, "ACTIVE", nil)
		f.Add("eu-west-1", b, "ACTIVE", nil)
		l, _, clk := newTestLister(f, []string{"eu-west-1"}, nil)
		res := scannertest.ScanOK(t, bus.Scanner(clk), eksScan(eksSource("eks", "eu-west-1"), l))
		names := scannertest.Names(t, bus.New(t))
		if res.Appeared != 2 {
			t.Fatalf("%d appeared, want 2", res.Appeared)
		}
		checkNewName(t, names, newARN("eu-west-1", a), a)
		checkNewName(t, names, newARN("eu-west-1", b), b)
		if names[newARN("eu-west-1", a)] == names[newARN("eu-west-1", b)] {
			t.Fatalf("both announced as %s", names[newARN("eu-west-1", a)])
		}
	})
	t.Run("one named by an older version", func(t *testing.T) {
		bus := scannertest.NewBus(t)
		f := eksfake.New(t)
		f.Add("eu-west-1", a, "ACTIVE", nil)
		f.Add("us-east-1", "Prod_Cluster.1", "ACTIVE", nil)
		ref := eksSource("eks", "eu-west-1", "us-east-1")
		l, _, clk := newTestLister(f, []string{"eu-west-1", "us-east-1"}, nil)
		olderVersionScan(t, bus, clk, ref, l)

		f.Add("eu-west-1", b, "ACTIVE", nil)
		scannertest.ScanOK(t, bus.Scanner(clk), eksScan(ref, l))
		names := scannertest.Names(t, bus.New(t))
		if _, ok := names[newARN("eu-west-1", a)]; ok {
			t.Errorf("%s, named by the older version, was announced again as %s", a, names[newARN("eu-west-1", a)])
		}
		checkNewName(t, names, newARN("eu-west-1", b), b)
	})
}

// TestHandoverKeepsClusterNames: a rule that moves to another source listing the same ARN (an
// added region, another Secret) finds the cluster under the name an older version gave it in the
// old source's inventory, and keeps it; a cluster only the new source lists is new and gets the
// 64-bit name.
func TestHandoverKeepsClusterNames(t *testing.T) {
	bus := scannertest.NewBus(t)
	f := eksfake.New(t)
	f.Add("us-east-1", "Prod_Cluster.1", "ACTIVE", nil)
	f.Add("eu-west-1", "Other_Cluster.3", "ACTIVE", nil)
	l, _, clk := newTestLister(f, []string{"us-east-1"}, nil)
	olderVersionScan(t, bus, clk, eksSource("eks", "us-east-1"), l)

	sc := bus.Scanner(clk)
	for _, to := range []struct {
		name    string
		ref     events.SourceRef
		regions []string
	}{
		{"added region", eksSource("eks", "eu-west-1", "us-east-1"), []string{"eu-west-1", "us-east-1"}},
		{"other Secret", eksSource("eks-other", "us-east-1"), []string{"us-east-1"}},
	} {
		t.Run(to.name, func(t *testing.T) {
			lt, _, _ := newTestLister(f, to.regions, nil)
			res := scannertest.ScanOK(t, sc, eksScan(to.ref, lt))
			names := scannertest.Names(t, bus.New(t))
			if res.Appeared != len(to.regions) {
				t.Fatalf("%d appeared in the new source, want %d", res.Appeared, len(to.regions))
			}
			if got := names[prodARN("us-east-1")]; got != legacyProd {
				t.Errorf("Prod_Cluster.1 appeared in the new source as %q, want its name %s", got, legacyProd)
			}
			if len(to.regions) == 2 {
				checkNewName(t, names, newARN("eu-west-1", "Other_Cluster.3"), "Other_Cluster.3")
			}
		})
	}
}

// TestRestartKeepsClusterNames: after a restart (a new scanner over the same bucket, nothing in
// memory) every cluster keeps the name it was announced under, the 32-bit name of an older
// version as well as the 64-bit name of a cluster first seen after the upgrade, in its source
// and in another source that lists it (the names come from the inventory in the bucket).
func TestRestartKeepsClusterNames(t *testing.T) {
	bus := scannertest.NewBus(t)
	f := eksfake.New(t)
	f.Add("us-east-1", "Prod_Cluster.1", "ACTIVE", nil)
	l, _, clk := newTestLister(f, []string{"us-east-1"}, nil)
	ref := eksSource("eks", "us-east-1")
	olderVersionScan(t, bus, clk, ref, l)
	f.Add("us-east-1", "New_Cluster.2", "ACTIVE", nil)
	if res := scannertest.ScanOK(t, bus.Scanner(clk), eksScan(ref, l)); res.Appeared != 1 || res.Updated != 0 {
		t.Fatalf("upgrade scan = %+v, want New_Cluster.2 appeared and nothing updated", res)
	}
	bus.New(t)

	restarted := bus.Scanner(clk)
	if res := scannertest.ScanOK(t, restarted, eksScan(ref, l)); res.Appeared+res.Updated+res.Gone != 0 {
		t.Fatalf("scan after the restart announced %+v (%v)", res, scannertest.Names(t, bus.New(t)))
	}
	other := eksSource("eks-other", "us-east-1")
	lo, _, _ := newTestLister(f, []string{"us-east-1"}, nil)
	scannertest.ScanOK(t, restarted, eksScan(other, lo))
	names := scannertest.Names(t, bus.New(t))
	if got := names[prodARN("us-east-1")]; got != legacyProd {
		t.Errorf("after the restart, Prod_Cluster.1 appeared in another source as %q, want %s", got, legacyProd)
	}
	checkNewName(t, names, newARN("us-east-1", "New_Cluster.2"), "New_Cluster.2")
}
