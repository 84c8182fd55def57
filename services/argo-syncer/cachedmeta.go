package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedMeta is what argo-syncer keeps of a cached object's metadata when it caches a
// projection of the object (cachedApplication, cachedProject, cachedSecret): 160 bytes where metav1.ObjectMeta
// takes 232 before its maps, lists and strings. What it drops (the creation time, generation,
// owner references, managed fields and the rest) no reader of the cache looks at; objects
// argo-syncer writes are built from the rendered object, never from the cached one.
type cachedMeta struct {
	Name, Namespace     string
	UID                 types.UID
	ResourceVersion     string
	DeletionTimestamp   *metav1.Time
	Finalizers          []string
	Labels, Annotations metaStrings
}

// newCachedMeta keeps what cachedMeta holds of m, its namespace and finalizers interned and its
// labels and annotations as metaStrings.
func newCachedMeta(m *metav1.ObjectMeta) cachedMeta {
	c := cachedMeta{Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp, Labels: newMetaStrings(m.Labels), Annotations: newMetaStrings(m.Annotations)}
	if len(m.Finalizers) > 0 {
		c.Finalizers = make([]string, len(m.Finalizers))
		for i, f := range m.Finalizers {
			c.Finalizers[i] = intern(f)
		}
	}
	return c
}

// deepCopy copies m; Labels and Annotations are never changed in place (SetLabels replaces
// them), so the copy shares them.
func (m *cachedMeta) deepCopy() cachedMeta {
	c := *m
	c.Finalizers = append([]string(nil), m.Finalizers...)
	if m.DeletionTimestamp != nil {
		c.DeletionTimestamp = m.DeletionTimestamp.DeepCopy()
	}
	return c
}

// kept returns m: labelOf and annotationOf read a projection's labels and annotations through it
// without building a map.
func (m *cachedMeta) kept() *cachedMeta { return m }

// The projections are runtime.Objects and metav1.Objects, as the informer's cache and its
// indexers need. The getters of what cachedMeta does not keep return the zero value and their
// setters drop what they are given: the cache only reads. A map or slice a getter returns is the
// caller's own.

var (
	_ metav1.Object = (*cachedApplication)(nil)
	_ metav1.Object = (*cachedProject)(nil)
	_ metav1.Object = (*cachedSecret)(nil)
)

func (*cachedApplication) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (a *cachedApplication) DeepCopyObject() runtime.Object {
	c := &cachedApplication{cachedMeta: a.deepCopy(), Project: a.Project, SpecDigest: a.SpecDigest, status: a.status}
	if a.Foreign != nil {
		c.Foreign = a.Foreign.DeepCopy()
	}
	return c
}

func (*cachedProject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (p *cachedProject) DeepCopyObject() runtime.Object {
	// SourceRepos is never changed in place: shared.
	c := &cachedProject{cachedMeta: p.deepCopy(), SourceRepos: p.SourceRepos, SpecDigest: p.SpecDigest}
	if p.Foreign != nil {
		c.Foreign = p.Foreign.DeepCopy()
	}
	return c
}

func (*cachedSecret) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (s *cachedSecret) DeepCopyObject() runtime.Object {
	c := *s
	c.cachedMeta = s.deepCopy()
	return &c
}

func (m *cachedMeta) GetNamespace() string                { return m.Namespace }
func (m *cachedMeta) SetNamespace(ns string)              { m.Namespace = ns }
func (m *cachedMeta) GetName() string                     { return m.Name }
func (m *cachedMeta) SetName(name string)                 { m.Name = name }
func (m *cachedMeta) GetUID() types.UID                   { return m.UID }
func (m *cachedMeta) SetUID(uid types.UID)                { m.UID = uid }
func (m *cachedMeta) GetResourceVersion() string          { return m.ResourceVersion }
func (m *cachedMeta) SetResourceVersion(v string)         { m.ResourceVersion = v }
func (m *cachedMeta) GetDeletionTimestamp() *metav1.Time  { return m.DeletionTimestamp }
func (m *cachedMeta) SetDeletionTimestamp(t *metav1.Time) { m.DeletionTimestamp = t }
func (m *cachedMeta) GetFinalizers() []string             { return append([]string(nil), m.Finalizers...) }
func (m *cachedMeta) SetFinalizers(f []string)            { m.Finalizers = f }
func (m *cachedMeta) GetLabels() map[string]string        { return m.Labels.Map() }
func (m *cachedMeta) SetLabels(l map[string]string)       { m.Labels = newMetaStrings(l) }
func (m *cachedMeta) GetAnnotations() map[string]string   { return m.Annotations.Map() }
func (m *cachedMeta) SetAnnotations(a map[string]string)  { m.Annotations = newMetaStrings(a) }

func (*cachedMeta) GetGenerateName() string                       { return "" }
func (*cachedMeta) SetGenerateName(string)                        {}
func (*cachedMeta) GetGeneration() int64                          { return 0 }
func (*cachedMeta) SetGeneration(int64)                           {}
func (*cachedMeta) GetSelfLink() string                           { return "" }
func (*cachedMeta) SetSelfLink(string)                            {}
func (*cachedMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (*cachedMeta) SetCreationTimestamp(metav1.Time)              {}
func (*cachedMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (*cachedMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (*cachedMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*cachedMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*cachedMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*cachedMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
