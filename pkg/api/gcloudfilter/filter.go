// Package gcloudfilter evaluates gcloud's resource filter expressions (`gcloud topic filters`, the
// --filter flag of `gcloud container clusters list`) over a resource decoded from JSON, so that
// a ClusterRule's GKE source selects clusters with the expressions its authors already use.
//
// Grammar, as gcloud's own parser has it (highest precedence first):
//
//	term     key op operand | -term | NOT term | key:(a b ...) | ( expr )
//	and      term AND term            explicit conjunction
//	or       and OR and               explicit disjunction
//	expr     or or ...                adjacent terms: implicit conjunction, weakest of all
//
// As in gcloud, AND and OR in one parenthesis group are an error ("a AND b OR c" must be written
// "(a AND b) OR c" or "a AND (b OR c)"), because their precedence surprises readers.
//
// Operators: "=" equals, "!=" not equals, ":" has, "~" and "!~" regular expression (RE2, not
// anchored), "<", "<=", ">", ">=" (numeric when both sides are numbers, else text). "=" and ":"
// compare case-insensitively and accept "*" globs in the operand; ":" matches the whole value or
// any of its words (runs of letters and digits), and "key:*" is true when key is set. A key
// whose value is a list matches when any element matches (for "!=" and "!~": when none does).
// A key that is absent matches nothing except through "!=", "!~", NOT or "-".
//
// Keys are dotted paths over the whole resource ("resourceLabels.env",
// "privateClusterConfig.enablePrivateNodes", "nodePools.config.machineType"); a list on the way
// is searched element by element. gcloud's transforms and functions (key.scope(), date(), ...)
// and its global restrictions (a bare word without an operator) are not supported and are
// rejected with an error naming them, never silently treated as false.
//
// Hand-written rather than a library: no maintained Go implementation of this grammar exists,
// and the language is small enough to test exhaustively (filter_test.go).
package gcloudfilter

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Filter is a compiled expression. The zero value (and Compile("")) matches everything.
type Filter struct {
	root node
	text string
}

// String returns the expression the filter was compiled from.
func (f *Filter) String() string { return f.text }

// Matches reports whether the resource (JSON values: maps, slices, strings, float64, bool, nil)
// satisfies the filter.
func (f *Filter) Matches(resource map[string]any) bool {
	if f == nil || f.root == nil {
		return true
	}
	return f.root.eval(resource)
}

// SyntaxError is a malformed expression: Msg says what is wrong and Pos where (a byte offset).
type SyntaxError struct {
	Expr string
	Pos  int
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("filter %q: %s at position %d (%s*HERE*%s)", e.Expr, e.Msg, e.Pos+1, e.Expr[:e.Pos], e.Expr[e.Pos:])
}

// Compile parses an expression; an empty one matches everything. A malformed one is a *SyntaxError naming the position.
func Compile(expr string) (*Filter, error) {
	if strings.TrimSpace(expr) == "" {
		return &Filter{text: expr}, nil
	}
	p := &parser{src: expr, groups: []int{0}}
	root, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.src) {
		return nil, p.errorf("unexpected %q", p.src[p.pos:])
	}
	return &Filter{root: root, text: expr}, nil
}

// node is one evaluable part of an expression.
type node interface{ eval(r map[string]any) bool }

type andNode struct{ l, r node }
type orNode struct{ l, r node }
type notNode struct{ n node }

func (n andNode) eval(r map[string]any) bool { return n.l.eval(r) && n.r.eval(r) }
func (n orNode) eval(r map[string]any) bool  { return n.l.eval(r) || n.r.eval(r) }
func (n notNode) eval(r map[string]any) bool { return !n.n.eval(r) }

// Operator group bits of one parenthesis level (see parser.groups).
const (
	opAND = 1 << iota
	opOR
)

type parser struct {
	src string
	pos int
	// groups holds, per open parenthesis level, which of AND and OR were seen in it.
	groups []int
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Expr: p.src, Pos: min(p.pos, len(p.src)), Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) && unicode.IsSpace(rune(p.src[p.pos])) {
		p.pos++
	}
}

// word reports whether the next token is the logical keyword w, consuming it when it is.
func (p *parser) word(w string) bool {
	p.skipSpace()
	end := p.pos + len(w)
	if end > len(p.src) || p.src[p.pos:end] != w {
		return false
	}
	if end < len(p.src) && !unicode.IsSpace(rune(p.src[end])) && p.src[end] != '(' {
		return false // a key such as "ORDER" or "NOTES"
	}
	p.pos = end
	return true
}

func (p *parser) peekWord(w string) bool {
	save := p.pos
	ok := p.word(w)
	p.pos = save
	return ok
}

func (p *parser) mark(op int) error {
	g := &p.groups[len(p.groups)-1]
	*g |= op
	if *g == opAND|opOR {
		return p.errorf("AND and OR combined without parentheses (write (a AND b) OR c, or a AND (b OR c))")
	}
	return nil
}

// parseExpr: or-terms joined by adjacency (implicit AND).
func (p *parser) parseExpr() (node, error) {
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] == ')' || p.peekWord("AND") || p.peekWord("OR") {
			return n, nil
		}
		r, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		n = andNode{n, r}
	}
}

func (p *parser) parseOr() (node, error) {
	n, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.word("OR") {
		if err := p.mark(opOR); err != nil {
			return nil, err
		}
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		n = orNode{n, r}
	}
	return n, nil
}

func (p *parser) parseAnd() (node, error) {
	n, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.word("AND") {
		if err := p.mark(opAND); err != nil {
			return nil, err
		}
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		n = andNode{n, r}
	}
	return n, nil
}

func (p *parser) parseNot() (node, error) {
	if p.word("NOT") {
		n, err := p.parseTerm()
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	}
	return p.parseTerm()
}

// operators, longest first so that "!=" is not read as "!" and "<=" not as "<".
var operators = []string{"!=", "!~", "<=", ">=", "=", ":", "~", "<", ">"}

// keyChars ends a key: an operator character, a space or a parenthesis.
const keyStop = "=:~<>!() \t\r\n"

func (p *parser) parseTerm() (node, error) {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return nil, p.errorf("term expected")
	}
	switch c := p.src[p.pos]; c {
	case '(':
		return p.parseGroup()
	case ')':
		return nil, p.errorf("term expected")
	case '-':
		p.pos++
		n, err := p.parseTerm()
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	}
	key, err := p.parseKey()
	if err != nil {
		return nil, err
	}
	op, err := p.parseOperator(key)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.src) && p.src[p.pos] == '(' && (op == "=" || op == ":") {
		list, err := p.parseOperandList()
		if err != nil {
			return nil, err
		}
		return newTerm(key, op, list, p)
	}
	v, err := p.operand("()")
	if err != nil {
		return nil, err
	}
	return newTerm(key, op, []string{v}, p)
}

// parseGroup reads a parenthesised expression, the parser at its "(".
func (p *parser) parseGroup() (node, error) {
	p.pos++
	p.groups = append(p.groups, 0)
	n, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos >= len(p.src) || p.src[p.pos] != ')' {
		return nil, p.errorf("missing )")
	}
	p.pos++
	p.groups = p.groups[:len(p.groups)-1]
	return n, nil
}

// parseKey reads the key of a term and refuses what gcloud has but this package does not
// support (a transform or function call) and a logical operator in its place.
func (p *parser) parseKey() (string, error) {
	start := p.pos
	for p.pos < len(p.src) && !strings.ContainsRune(keyStop, rune(p.src[p.pos])) {
		p.pos++
	}
	key := p.src[start:p.pos]
	if key == "AND" || key == "OR" || key == "NOT" {
		p.pos = start
		return "", p.errorf("term expected before %s", key)
	}
	if p.pos < len(p.src) && p.src[p.pos] == '(' {
		return "", p.errorf("transform or function %q is not supported", key)
	}
	if err := checkKey(key); err != nil {
		p.pos = start
		return "", p.errorf("%v", err)
	}
	return key, nil
}

// parseOperator reads the operator after key and the space after it; an operand must follow.
func (p *parser) parseOperator(key string) (string, error) {
	p.skipSpace()
	op := ""
	for _, o := range operators {
		if strings.HasPrefix(p.src[p.pos:], o) {
			op = o
			break
		}
	}
	if op == "" {
		if p.pos < len(p.src) && p.src[p.pos] == '!' {
			return "", p.errorf("malformed operator")
		}
		return "", p.errorf("operator expected after %q (global restrictions are not supported)", key)
	}
	p.pos += len(op)
	p.skipSpace()
	if p.peekWord("AND") || p.peekWord("OR") || p.peekWord("NOT") {
		return "", p.errorf("operand expected after %s, not a logical operator", op)
	}
	return op, nil
}

// parseOperandList reads an operand list, "(a b)" or "(a, b)", the parser at its "(".
func (p *parser) parseOperandList() ([]string, error) {
	p.pos++
	var list []string
	for {
		p.skipSpace()
		if p.pos < len(p.src) && p.src[p.pos] == ')' {
			p.pos++
			break
		}
		if p.pos >= len(p.src) {
			return nil, p.errorf("missing ) in the operand list")
		}
		v, err := p.operand(",)")
		if err != nil {
			return nil, err
		}
		list = append(list, v)
		p.skipSpace()
		if p.pos < len(p.src) && p.src[p.pos] == ',' {
			p.pos++
		}
	}
	if len(list) == 0 {
		return nil, p.errorf("empty operand list")
	}
	return list, nil
}

// operand reads a quoted string ('...' or "...", with backslash escapes) or a bare token ended
// by a space or one of stop.
func (p *parser) operand(stop string) (string, error) {
	if p.pos >= len(p.src) {
		return "", p.errorf("operand expected")
	}
	if q := p.src[p.pos]; q == '"' || q == '\'' {
		p.pos++
		var b strings.Builder
		for p.pos < len(p.src) {
			c := p.src[p.pos]
			switch {
			case c == '\\' && p.pos+1 < len(p.src):
				b.WriteByte(p.src[p.pos+1])
				p.pos += 2
			case c == q:
				p.pos++
				return b.String(), nil
			default:
				b.WriteByte(c)
				p.pos++
			}
		}
		return "", p.errorf("unterminated string")
	}
	start := p.pos
	for p.pos < len(p.src) && !unicode.IsSpace(rune(p.src[p.pos])) && !strings.ContainsRune(stop, rune(p.src[p.pos])) {
		p.pos++
	}
	if p.pos == start {
		return "", p.errorf("operand expected")
	}
	return p.src[start:p.pos], nil
}

// checkKey accepts dotted names; empty segments ("a..b") and an empty key are errors.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("key expected")
	}
	for _, seg := range strings.Split(key, ".") {
		if seg == "" {
			return fmt.Errorf("key %q has an empty segment", key)
		}
		if strings.ContainsAny(seg, "[]") {
			return fmt.Errorf("key %q: list indexes are not supported (a list matches when any element does)", key)
		}
	}
	return nil
}

// term is one comparison.
type term struct {
	path  []string
	op    string
	vals  []string
	globs []string       // lower-cased patterns for = and :
	re    *regexp.Regexp // for ~ and !~
	num   []float64      // the operand as a number, for < <= > >= when isNum
	isNum []bool
}

func newTerm(key, op string, vals []string, p *parser) (node, error) {
	t := &term{path: strings.Split(key, "."), op: op, vals: vals}
	switch op {
	case "~", "!~":
		re, err := regexp.Compile(vals[0])
		if err != nil {
			return nil, p.errorf("invalid regular expression %q: %v", vals[0], err)
		}
		t.re = re
	case "=", "!=", ":":
		for _, v := range vals {
			t.globs = append(t.globs, strings.ToLower(v))
		}
	default:
		f, err := strconv.ParseFloat(vals[0], 64)
		t.num, t.isNum = []float64{f}, []bool{err == nil}
	}
	if op == "!=" {
		return notNode{&term{path: t.path, op: "=", vals: vals, globs: t.globs}}, nil
	}
	if op == "!~" {
		return notNode{&term{path: t.path, op: "~", vals: vals, re: t.re}}, nil
	}
	return t, nil
}

// glob matches s against a simple pattern whose only wildcard is "*" (any run of characters,
// "/" included: gcloud's simple patterns know no "?" or "[...]", so path.Match does not fit).
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

func (t *term) eval(r map[string]any) bool {
	var values []any
	collect(r, t.path, &values)
	for _, v := range values {
		if t.match(v) {
			return true
		}
	}
	return false
}

// collect gathers the values at path, descending into every element of a list on the way.
func collect(cur any, path []string, out *[]any) {
	switch v := cur.(type) {
	case []any:
		for _, e := range v {
			collect(e, path, out)
		}
		return
	case nil:
		return
	}
	if len(path) == 0 {
		*out = append(*out, cur)
		return
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return
	}
	collect(m[path[0]], path[1:], out)
}

func (t *term) match(v any) bool {
	s, ok := text(v)
	if !ok {
		// A map: only "key:*" (the key is set) is true of it.
		return t.op == ":" && len(t.globs) == 1 && t.globs[0] == "*"
	}
	switch t.op {
	case "=":
		return t.anyGlob(strings.ToLower(s))
	case ":":
		ls := strings.ToLower(s)
		if t.anyGlob(ls) {
			return true
		}
		for _, w := range strings.FieldsFunc(ls, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
			if t.anyGlob(w) {
				return true
			}
		}
		return false
	case "~":
		return t.re.MatchString(s)
	}
	c := compare(s, t.vals[0], t.num[0], t.isNum[0])
	switch t.op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	default:
		return c >= 0
	}
}

func (t *term) anyGlob(s string) bool {
	for _, g := range t.globs {
		if g == "*" {
			if s != "" {
				return true
			}
			continue
		}
		if glob(g, s) {
			return true
		}
	}
	return false
}

// compare compares numerically when both sides are numbers, else as text.
func compare(s, operand string, num float64, isNum bool) int {
	if isNum {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			switch {
			case f < num:
				return -1
			case f > num:
				return 1
			}
			return 0
		}
	}
	return strings.Compare(s, operand)
}

// text renders a scalar as gcloud compares it: booleans as true/false, numbers in decimal.
func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}
