package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// applicationMeta is what argo-syncer keeps of a cached Application's metadata besides its labels
// and annotations: 96 bytes where metav1.ObjectMeta takes 232 before its maps, lists and
// strings. What it drops (the creation time, generation, owner references, managed fields and the
// rest) no reader of the cache looks at; Applications argo-syncer writes are built from the
// rendered object, never from the cached one.
type applicationMeta struct {
	Name, Namespace   string
	UID               types.UID
	ResourceVersion   string
	DeletionTimestamp *metav1.Time
	Finalizers        []string
}

// newApplicationMeta keeps what applicationMeta holds of m, its namespace and finalizers interned.
func newApplicationMeta(m *metav1.ObjectMeta) applicationMeta {
	a := applicationMeta{Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp}
	if len(m.Finalizers) > 0 {
		a.Finalizers = make([]string, len(m.Finalizers))
		for i, f := range m.Finalizers {
			a.Finalizers[i] = intern(f)
		}
	}
	return a
}

// A cachedApplication is a runtime.Object and a metav1.Object, as the informer's cache and its
// indexers need. The getters of what applicationMeta does not keep return the zero value and
// their setters drop what they are given: the cache only reads. A map or slice a getter returns
// is the caller's own.

var _ metav1.Object = (*cachedApplication)(nil)

func (*cachedApplication) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (a *cachedApplication) DeepCopyObject() runtime.Object {
	// Labels and Annotations are never changed in place (SetLabels replaces them): shared.
	c := &cachedApplication{applicationMeta: a.applicationMeta, Labels: a.Labels, Annotations: a.Annotations,
		Project: a.Project, SpecDigest: a.SpecDigest, Status: a.Status}
	c.Finalizers = append([]string(nil), a.Finalizers...)
	if a.DeletionTimestamp != nil {
		c.DeletionTimestamp = a.DeletionTimestamp.DeepCopy()
	}
	if a.Foreign != nil {
		c.Foreign = a.Foreign.DeepCopy()
	}
	return c
}

func (a *cachedApplication) GetNamespace() string                { return a.Namespace }
func (a *cachedApplication) SetNamespace(ns string)              { a.Namespace = ns }
func (a *cachedApplication) GetName() string                     { return a.Name }
func (a *cachedApplication) SetName(name string)                 { a.Name = name }
func (a *cachedApplication) GetUID() types.UID                   { return a.UID }
func (a *cachedApplication) SetUID(uid types.UID)                { a.UID = uid }
func (a *cachedApplication) GetResourceVersion() string          { return a.ResourceVersion }
func (a *cachedApplication) SetResourceVersion(v string)         { a.ResourceVersion = v }
func (a *cachedApplication) GetDeletionTimestamp() *metav1.Time  { return a.DeletionTimestamp }
func (a *cachedApplication) SetDeletionTimestamp(t *metav1.Time) { a.DeletionTimestamp = t }
func (a *cachedApplication) GetFinalizers() []string             { return append([]string(nil), a.Finalizers...) }
func (a *cachedApplication) SetFinalizers(f []string)            { a.Finalizers = f }
func (a *cachedApplication) GetLabels() map[string]string        { return a.Labels.Map() }
func (a *cachedApplication) SetLabels(m map[string]string)       { a.Labels = newMetaStrings(m) }
func (a *cachedApplication) GetAnnotations() map[string]string   { return a.Annotations.Map() }
func (a *cachedApplication) SetAnnotations(m map[string]string)  { a.Annotations = newMetaStrings(m) }

func (*cachedApplication) GetGenerateName() string                       { return "" }
func (*cachedApplication) SetGenerateName(string)                        {}
func (*cachedApplication) GetGeneration() int64                          { return 0 }
func (*cachedApplication) SetGeneration(int64)                           {}
func (*cachedApplication) GetSelfLink() string                           { return "" }
func (*cachedApplication) SetSelfLink(string)                            {}
func (*cachedApplication) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (*cachedApplication) SetCreationTimestamp(metav1.Time)              {}
func (*cachedApplication) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (*cachedApplication) SetDeletionGracePeriodSeconds(*int64)          {}
func (*cachedApplication) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*cachedApplication) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*cachedApplication) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*cachedApplication) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
