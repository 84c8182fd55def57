package eventstest

// Names that collide under the 32-bit hash suffix of events.LegacyObjectName, found by brute
// force over the upper- and lower-case spellings of one name (about 2^17 SHA-256 sums, under a
// second): the first two spellings whose normalised names share the first 8 hex digits of
// their SHA-256. Each pair normalises to the same legacy name and to two different names under
// events.ObjectName's 64-bit suffix (pkg/events TestLegacyCollisionsAreRealAndGone checks both),
// so tests can show that a crafted collision no longer makes two clusters share an object.
const (
	// ClusterCollidingA and ClusterCollidingB: LegacyObjectName gives
	// "fleet-cluster-prod-eu-d5baec63" for both (the cluster Secret and AppProject names of
	// versions before 64-bit suffixes).
	ClusterCollidingA = "FLEEt-CLUsteR-prOd-eu"
	ClusterCollidingB = "FlEeT-cLusTEr-PROd-eu"

	// AppCollidingA and AppCollidingB: LegacyApplicationName(cluster, AppCollidingEnforcement)
	// gives "fleet-cluster-prod-us-agent-76dfa9b6" for both (the Application name of versions
	// before 64-bit suffixes); their own normalised names differ.
	AppCollidingA           = "FLeeT-clusTer-Prod-Us"
	AppCollidingB           = "fLeET-clUsTeR-prOD-Us"
	AppCollidingEnforcement = "agent"
)
