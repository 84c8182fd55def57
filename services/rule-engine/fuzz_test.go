package main

import (
	"context"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
)

// FuzzRender renders arbitrary templates in every kind of field through renderSafely, the
// engine's entry point: it never panics, returns within its limit (plus the guards' step), and
// never returns more than maxRenderOutput. Found inputs are kept in testdata/fuzz/FuzzRender.
func FuzzRender(f *testing.F) {
	for _, seed := range []string{
		"${{ name }}-app", "${% if name == 'c1' %}a${% else %}b${% endif %}", "${{ genericConfig['driverName'] }}",
		"${% for i in range(3) %}${{ i }}${% endfor %}", "${% set x = 'a' ~ name %}${{ x|upper }}", "${# c #}x",
		"${% macro m(n) %}${{ n }}${% endmacro %}${{ m(1) }}", "${{ requests.get('http://x').text }}", "${{", "${% for %}",
		runawayLoop, "${{ 'x' * 100 }}", "${{ range(5)|join(',') }}", "${{ labels }}${{ missing.attr }}",
	} {
		f.Add(seed)
	}
	c := cluster("c1", map[string]string{"env": "prod"})
	vars := templateVars(&c)
	r := newRenderer(nil, time.Second)
	r.limit = 100 * time.Millisecond
	f.Fuzz(func(t *testing.T, tpl string) {
		compiled := compile([]v1beta1.Enforcement{{Name: tpl, Repo: "r" + tpl, Path: tpl, Namespace: tpl,
			Labels: map[string]string{tpl: tpl}}})
		start := time.Now()
		enfs, err := r.renderSafely(context.Background(), compiled, vars)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("render took %s, limit %s", took, r.limit)
		}
		if err != nil {
			return
		}
		if n := len(enfs[0].Name) + len(enfs[0].Repo) + len(enfs[0].Path) + len(enfs[0].Namespace); n > maxRenderOutput {
			t.Errorf("render returned %d bytes, cap %d", n, maxRenderOutput)
		}
	})
}
