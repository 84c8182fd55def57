package main

// The ClusterRule CRD's schema, applied to a previewed manifest as the API server applies it on
// create: unknown fields are a strict decoding error, the schema's defaults are filled in, and
// the object is validated against the OpenAPI schema (types, enums, required fields, patterns,
// bounds) and its x-kubernetes-validations (CEL) rules. The steps and their order are those of
// k8s.io/apiextensions-apiserver's custom resource handler and strategy (decode: prune, then
// default; create: drop status, validate metadata, schema, embedded objects, list types, then
// CEL unless a blocking error came first), so a preview shows the rule the API server would
// store, or the error it would answer.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/enforcement-io/enforcement/pkg/api/crds"
	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	fielderrors "k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// ruleSchema is the ClusterRule CRD's v1beta1 schema, compiled once: the structural schema
// (pruning and defaulting), the OpenAPI validator and the CEL rules.
type ruleSchema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	// cel is nil when the schema has no x-kubernetes-validations.
	cel *cel.Validator
}

// clusterRuleSchema compiles the embedded ClusterRule CRD's schema on first use (serveAPI calls
// it at start).
var clusterRuleSchema = sync.OnceValues(func() (*ruleSchema, error) {
	crd, err := crds.ClusterRule()
	if err != nil {
		return nil, err
	}
	return newRuleSchema(crd, v1beta1.GroupVersion.Version)
})

// newRuleSchema compiles the schema of one version of a CRD as the API server does when it
// starts serving it.
func newRuleSchema(crd *apiextensionsv1.CustomResourceDefinition, version string) (*ruleSchema, error) {
	var v1Validation *apiextensionsv1.CustomResourceValidation
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			v1Validation = v.Schema
		}
	}
	if v1Validation == nil || v1Validation.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("CRD %s has no schema for version %s", crd.Name, version)
	}
	var validation apiextensionsinternal.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v1Validation, &validation, nil); err != nil {
		return nil, fmt.Errorf("CRD %s: convert the schema: %w", crd.Name, err)
	}
	s, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("CRD %s: structural schema: %w", crd.Name, err)
	}
	// NewStructural shares the defaults with its input; PruneDefaults rewrites them.
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("CRD %s: prune the defaults: %w", crd.Name, err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(validation.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("CRD %s: schema validator: %w", crd.Name, err)
	}
	return &ruleSchema{structural: s, validator: validator, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
}

// admit applies the schema to obj, a decoded ClusterRule manifest with its apiVersion, kind,
// name and namespace already checked, in place: a field the schema does not know is an error, as
// with the API server's strict field validation (kubectl's default), not silently pruned; then
// it fills in the defaults, drops status (a create ignores it: the CRD has a status
// subresource) and validates. Its errors read as the API server's answer.
func (rs *ruleSchema) admit(ctx context.Context, obj map[string]any) error {
	_, _, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return notHandled(err)
	}
	unknown = append(unknown, structuralpruning.PruneWithOptions(obj, rs.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	ferr, embedded := schemaobjectmeta.CoerceWithOptions(nil, obj, rs.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		return notHandled(ferr)
	}
	unknown = append(unknown, embedded...)
	if len(unknown) > 0 {
		errs := make([]error, len(unknown))
		for i, p := range unknown {
			errs[i] = fmt.Errorf("unknown field %q", p)
		}
		return notHandled(runtime.NewStrictDecodingError(errs))
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, rs.structural)
	structuraldefaulting.Default(obj, rs.structural)
	delete(obj, "status")

	u := &unstructured.Unstructured{Object: obj}
	errs := metavalidation.ValidateObjectMetaAccessor(u, true, metavalidation.NameIsDNSSubdomain, fielderrors.NewPath("metadata"))
	// The OpenAPI validator lists its errors in the order it walks the object's maps, which
	// varies from run to run (in the API server too): sorted, a preview always reads the same.
	schemaErrs := apiservervalidation.ValidateCustomResource(nil, obj, rs.validator)
	slices.SortStableFunc(schemaErrs, func(a, b *fielderrors.Error) int { return strings.Compare(a.Field, b.Field) })
	errs = append(errs, schemaErrs...)
	errs = append(errs, schemaobjectmeta.Validate(nil, obj, rs.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, rs.structural, obj)...)
	if rs.cel != nil {
		if blocking := blockingError(errs); blocking != nil {
			errs = append(errs, blocking)
		} else {
			celErrs, _ := rs.cel.Validate(ctx, nil, rs.structural, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(v1beta1.GroupVersion.WithKind("ClusterRule").GroupKind(), u.GetName(), errs)
	}
	return nil
}

// notHandled is the API server's answer to a manifest it cannot decode into a ClusterRule.
func notHandled(err error) error {
	return fmt.Errorf("ClusterRule in version %q cannot be handled as a ClusterRule: %w", v1beta1.GroupVersion.Version, err)
}

// blockingError is the error the API server adds instead of running the CEL rules when the
// schema validation found an error that makes them meaningless (a missing field, a wrong type,
// an unsupported value, a value too long or too many items), nil otherwise.
func blockingError(errs fielderrors.ErrorList) *fielderrors.Error {
	for _, err := range errs {
		switch err.Type {
		case fielderrors.ErrorTypeNotSupported, fielderrors.ErrorTypeRequired, fielderrors.ErrorTypeTooLong, fielderrors.ErrorTypeTooMany, fielderrors.ErrorTypeTypeInvalid:
			return fielderrors.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return nil
}
