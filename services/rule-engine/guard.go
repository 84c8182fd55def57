package main

// Render guards. gonja has no way to stop a template from outside, and a goroutine cannot be
// killed, so a render that outlived TEMPLATE_RENDER_TIMEOUT used to keep running (and
// allocating) in the background. Instead every render carries a guard that the template itself
// runs into: the environment templates are compiled with wraps each control structure (for,
// if, set, macro, call, ...) so that each run of one checks the guard first, and every byte a
// template writes goes through the guard's writer. The guard fails once the render's context
// ends (the deadline or the caller's end) or the output passes maxRenderOutput, and gonja
// returns that error up through the whole render. A loop body that neither runs a control
// structure nor writes is bounded by the length of what it iterates, and range, the one way to
// make a long sequence out of nothing, is limited to maxRangeItems (as Jinja's sandbox limits it).
//
// The body of each for loop checks the guard on every iteration, and macro calls nest at most
// maxMacroDepth deep. Not guarded: a single expression that allocates at once, such as
// 'x' * 10**10 (its output is refused, but only once it is made).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/nikolalohinski/gonja/v2"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// maxRenderOutput caps what one render of a rule for a cluster writes, all fields together.
// An intent carries it in one NATS message (1 MiB by default), next to the target and triggers.
const maxRenderOutput = 256 << 10

// maxRangeItems is the longest sequence range() makes. Jinja's sandbox allows 100000, but a
// gonja loop costs about 20µs per item before its body first runs (it materialises the items
// first), so 10000 keeps that unguarded stretch near 0.2s.
const maxRangeItems = 10_000

// limitError is a render a guard stopped: past TEMPLATE_RENDER_TIMEOUT or over the output cap.
// Rendering it again would cost as much, so the engine remembers it per rule generation and
// cluster (store.putFailure) instead of rendering it again.
type limitError string

func (e limitError) Error() string { return string(e) }

// isRenderLimit tells whether err is (or wraps) a limitError.
func isRenderLimit(err error) bool {
	var l limitError
	return errors.As(err, &l)
}

// errRenderTimeout is the template error of a render that did not finish in time.
var errRenderTimeout error = limitError("template did not finish within TEMPLATE_RENDER_TIMEOUT (a loop too long, or a slow requests.get?)")

// errOutputCap is the template error of a render that wrote more than maxRenderOutput.
var errOutputCap error = limitError(fmt.Sprintf("rendered output is over the cap of %d bytes (%d KiB) per rule and cluster", maxRenderOutput, maxRenderOutput>>10))

// guardVar is the name under which a render's guard travels in the template's context, where
// the wrapped control structures find it.
const guardVar = "_enforcement_render_guard"

// guard is one render's budget. A render runs in one goroutine, so it needs no lock.
type guard struct {
	ctx        context.Context
	written    int
	macroDepth int
	// err is the first limit the render ran into; once set, every step fails with it.
	err error
}

// check returns nil while the render may go on, else why it may not: the context's cause
// (errRenderTimeout when TEMPLATE_RENDER_TIMEOUT passed) or the output cap.
func (g *guard) check() error {
	if g.err == nil && g.ctx.Err() != nil {
		g.err = context.Cause(g.ctx)
	}
	return g.err
}

// writer returns w behind the guard: each write is checked and counted against
// maxRenderOutput.
func (g *guard) writer(w io.Writer) io.Writer { return guardWriter{g: g, w: w} }

type guardWriter struct {
	g *guard
	w io.Writer
}

func (gw guardWriter) Write(p []byte) (int, error) {
	if err := gw.g.check(); err != nil {
		return 0, err
	}
	if gw.g.written += len(p); gw.g.written > maxRenderOutput {
		gw.g.err = errOutputCap
		return 0, gw.g.err
	}
	return gw.w.Write(p)
}

// guardedStructures are the control structures templates may use: gonja's own, each wrapped so
// that every run checks the render's guard.
var guardedStructures = []string{"autoescape", "block", "extends", "filter", "for", "from", "if", "import",
	"include", "macro", "raw", "set", "with", "do", "break", "continue", "trans", "call"}

// guardedEnvironment is gonja's default environment with the control structures guarded and
// range bounded. Templates are compiled against it (compileField).
var guardedEnvironment = func() *exec.Environment {
	def := gonja.DefaultEnvironment
	structures := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{})
	for _, name := range guardedStructures {
		if p, ok := def.ControlStructures.Get(name); ok {
			_ = structures.Register(name, guardedParser(p)) // names are distinct: never fails
		}
	}
	globals := exec.EmptyContext().Update(def.Context)
	globals.Set("range", boundedRange)
	return &exec.Environment{Context: globals, Filters: def.Filters, Tests: def.Tests, ControlStructures: structures, Methods: def.Methods}
}()

// guardedParser parses a control structure with gonja's parser p and wraps the result. The
// body of a for loop and of a macro is guarded too: a loop checks the guard on every
// iteration, a macro counts how deep its calls nest (maxMacroDepth).
func guardedParser(p parser.ControlStructureParser) parser.ControlStructureParser {
	return func(doc, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := p(doc, args)
		if err != nil {
			return cs, err
		}
		switch t := cs.(type) {
		case *controlStructures.ForControlStructure:
			guardBody(t.BodyWrapper, false)
		case *controlStructures.MacroControlStructure:
			guardBody(t.Wrapper, true)
		}
		if s, ok := cs.(exec.ControlStructure); ok {
			return guardedStructure{s}, nil
		}
		return cs, nil
	}
}

// guardOf finds the render's guard from a renderer.
func guardOf(r *exec.Renderer) (*guard, error) {
	v, _ := r.Environment.Context.Get(guardVar)
	g, ok := v.(*guard)
	if !ok { // a template that set a variable of that name
		return nil, fmt.Errorf("the variable name %s is reserved", guardVar)
	}
	return g, nil
}

// guardedStructure is a control structure that checks the render's guard before each run.
type guardedStructure struct{ exec.ControlStructure }

// Execute runs the control structure unless the render's guard says stop.
func (s guardedStructure) Execute(r *exec.Renderer, tag *nodes.ControlStructureBlock) error {
	g, err := guardOf(r)
	if err != nil {
		return err
	}
	if err := g.check(); err != nil {
		return err
	}
	return s.ControlStructure.Execute(r, tag)
}

// maxMacroDepth bounds how deep macro calls nest: a macro calling itself without end would
// otherwise grow the stack until Go stops the whole process.
const maxMacroDepth = 100

// guardBody puts the nodes of w behind one guardedBody.
func guardBody(w *nodes.Wrapper, macro bool) {
	if w == nil {
		return
	}
	w.Nodes = []nodes.Node{&nodes.ControlStructureBlock{Location: w.Location, Name: "guard",
		ControlStructure: &guardedBody{nodes: w.Nodes, macro: macro, pos: w.Location}}}
}

// guardedBody is the body of a loop or a macro: its nodes, run after a check of the guard.
type guardedBody struct {
	nodes []nodes.Node
	macro bool
	pos   *tokens.Token
}

func (b *guardedBody) Position() *tokens.Token { return b.pos }
func (b *guardedBody) String() string          { return "guarded body" }

// Execute checks the guard, then runs the body's nodes as gonja would (nodes.Walk with the
// same renderer).
func (b *guardedBody) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	g, err := guardOf(r)
	if err != nil {
		return err
	}
	if err := g.check(); err != nil {
		return err
	}
	if b.macro {
		if g.macroDepth >= maxMacroDepth {
			return fmt.Errorf("macro calls nested deeper than %d", maxMacroDepth)
		}
		g.macroDepth++
		defer func() { g.macroDepth-- }()
	}
	for _, n := range b.nodes {
		if err := nodes.Walk(r, n); err != nil {
			return err
		}
	}
	return nil
}

// boundedRange is Jinja's range([start,] stop[, step]) as a list of at most maxRangeItems
// numbers. gonja's own feeds a channel from a goroutine that runs until the range is exhausted,
// however early the template stops reading it.
func boundedRange(params *exec.VarArgs) ([]int, error) {
	ints := make([]int, len(params.Args))
	for i, a := range params.Args {
		switch {
		case a.IsInteger():
			ints[i] = a.Integer()
		case a.IsFloat() && a.Float() == math.Trunc(a.Float()) && math.Abs(a.Float()) < 1<<62:
			ints[i] = int(a.Float()) // gonja computes 10**10 as a float; Jinja has an integer
		default:
			return nil, errors.New("range: arguments must be integers")
		}
	}
	var start, stop int
	step := 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, errors.New("range: expected [start, ]stop[, step]")
	}
	if step == 0 {
		return nil, errors.New("range: step cannot be 0")
	}
	span, stride := uint64(0), uint64(1) // in uint64: stop-start overflows int for the widest ranges
	switch {
	case step > 0 && stop > start:
		span, stride = uint64(stop)-uint64(start), uint64(step)
	case step < 0 && start > stop:
		span, stride = uint64(start)-uint64(stop), -uint64(step)
	}
	n := span / stride
	if span%stride != 0 {
		n++
	}
	if n > maxRangeItems {
		return nil, fmt.Errorf("range of %d items is over the limit of %d", n, maxRangeItems)
	}
	out := make([]int, 0, n)
	for i, v := uint64(0), start; i < n; i, v = i+1, v+step {
		out = append(out, v)
	}
	return out, nil
}
