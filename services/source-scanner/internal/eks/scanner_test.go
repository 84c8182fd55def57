package eks

import (
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
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
