// Package monitoring checks the Grafana dashboards and Prometheus alerting rules under deploy/
// against the metrics the services really export: every PromQL expression is read, the metric
// names it selects are extracted, and each service's test hands its registry to CheckExported,
// which fails on a name of that service the registry does not describe.
//
// The expressions are read by a small PromQL scanner of our own rather than by
// github.com/prometheus/prometheus/promql/parser: every release of that module the module proxy
// serves requires k8s.io/* v0.35 and prometheus/common v0.69, which would lift the whole
// workspace past the k8s.io v0.31 that argo-cd v2.14 pins. The scanner knows the grammar's
// lexical shape (strings, label matchers, ranges and subqueries, grouping clauses, keywords,
// numbers and durations, Grafana variables) and every PromQL function name, so a misspelled
// function or an unbalanced bracket is an error, and what is left are the metric names.
package monitoring

import (
	"fmt"
	"slices"
	"strings"
)

// promqlFunctions are the names PromQL accepts before "(": functions (Prometheus 2.x and 3.x)
// and aggregation operators.
var promqlFunctions = toSet(
	// aggregation operators
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
	"topk", "quantile", "limitk", "limit_ratio",
	// functions
	"abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
	"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
	"count_over_time", "days_in_month", "day_of_month", "day_of_week", "day_of_year", "deg",
	"delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
	"histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum",
	"double_exponential_smoothing", "holt_winters", "hour", "idelta", "increase", "irate",
	"label_replace", "label_join", "last_over_time", "ln", "log10", "log2", "mad_over_time",
	"max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
	"present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn",
	"sin", "sinh", "sort", "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt",
	"stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp",
	"vector", "year",
)

// aggregators are the aggregation operators, which may take their grouping clause before
// their parameters.
var aggregators = toSet("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
	"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio")

// promqlKeywords are identifiers that are never metric names.
var promqlKeywords = toSet("by", "without", "on", "ignoring", "group_left", "group_right", "bool",
	"offset", "and", "or", "unless", "atan2", "inf", "nan", "start", "end")

// labelListClauses are followed by a parenthesised list of label names.
var labelListClauses = toSet("by", "without", "on", "ignoring", "group_left", "group_right")

func toSet(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// MetricNames returns the metric names a PromQL expression selects, sorted and without
// repeats: bare selectors (`foo{a="b"}`, `foo[5m]`) and `{__name__="foo"}`. It fails on an
// unbalanced bracket, an unterminated string, an unknown function, a `__name__` matched by a
// regular expression (which no check could follow) or an expression without any metric.
// Grafana variables (`$__rate_interval`, `$kind`, `${source}`) are accepted where a duration or
// a label value stands.
func MetricNames(expr string) ([]string, error) {
	s := &scanner{src: expr, names: map[string]bool{}}
	for {
		s.skipSpace()
		if s.eof() {
			break
		}
		if err := s.token(); err != nil {
			return nil, err
		}
	}
	if len(s.open) > 0 {
		return nil, fmt.Errorf("unclosed %q", s.open[len(s.open)-1])
	}
	if len(s.names) == 0 {
		return nil, fmt.Errorf("no metric in %q", expr)
	}
	out := make([]string, 0, len(s.names))
	for n := range s.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// token reads the token at the position, noting the metric names it selects.
func (s *scanner) token() error {
	c := s.src[s.pos]
	switch {
	case c == '(':
		s.open = append(s.open, c)
		s.pos++
	case c == '[':
		// A range or subquery: durations, numbers, ':' and Grafana variables only.
		body, err := s.until(']')
		if err != nil {
			return err
		}
		return checkRange(body)
	case c == ')':
		if len(s.open) == 0 || s.open[len(s.open)-1] != '(' {
			return fmt.Errorf("unexpected ) at %d", s.pos)
		}
		s.open = s.open[:len(s.open)-1]
		s.pos++
	case c == ']' || c == '}':
		return fmt.Errorf("unexpected %c at %d", c, s.pos)
	case c == '{':
		name, err := s.matchers()
		if err != nil {
			return err
		}
		if name != "" {
			s.names[name] = true
		}
	case c == '"' || c == '\'' || c == '`':
		_, err := s.str()
		return err
	case isDigit(c) || (c == '.' && s.pos+1 < len(s.src) && isDigit(s.src[s.pos+1])):
		s.word() // a number or a duration (after offset / @)
	case c == '$':
		s.variable()
	case isIdentStart(c):
		return s.identifier()
	case strings.IndexByte("+-*/%^=!<>,:@", c) >= 0:
		s.pos++
	default:
		return fmt.Errorf("unexpected %q at %d", c, s.pos)
	}
	return nil
}

// identifier reads a keyword, a function or aggregation name, or a metric name.
func (s *scanner) identifier() error {
	id := s.word()
	s.skipSpace()
	next := byte(0)
	if !s.eof() {
		next = s.src[s.pos]
	}
	lower := strings.ToLower(id)
	switch {
	case labelListClauses[lower]:
		if next == '(' {
			if _, err := s.until(')'); err != nil {
				return err
			}
		}
	case promqlKeywords[lower]:
	case aggregators[id] && (s.peekWord() == "by" || s.peekWord() == "without"):
		// "sum by (x) (...)": the grouping clause comes first
	case next == '(':
		if !promqlFunctions[id] {
			return fmt.Errorf("unknown function %s", id)
		}
	default:
		s.names[id] = true
	}
	return nil
}

// checkRange accepts the body of a range or subquery: "5m", "$__rate_interval", "1h:30s".
func checkRange(body string) error {
	for _, part := range strings.Split(body, ":") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue // "[1h:]": default resolution
		}
		if strings.HasPrefix(part, "$") {
			continue
		}
		for i := 0; i < len(part); i++ {
			if !isDigit(part[i]) && !strings.ContainsRune("smhdwyi", rune(part[i])) {
				return fmt.Errorf("bad duration %q", part)
			}
		}
	}
	return nil
}

// scanner walks a PromQL expression.
type scanner struct {
	src string
	pos int
	// open holds the brackets not closed yet; names the metric names selected so far.
	open  []byte
	names map[string]bool
}

func (s *scanner) eof() bool { return s.pos >= len(s.src) }

func (s *scanner) skipSpace() {
	for !s.eof() {
		switch s.src[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		case '#': // a comment runs to the end of the line
			for !s.eof() && s.src[s.pos] != '\n' {
				s.pos++
			}
		default:
			return
		}
	}
}

// word reads an identifier, number or duration.
func (s *scanner) word() string {
	start := s.pos
	for !s.eof() && (isIdentPart(s.src[s.pos]) || s.src[s.pos] == '.') {
		s.pos++
	}
	return s.src[start:s.pos]
}

// peekWord returns the identifier at the position, lower-cased, without moving.
func (s *scanner) peekWord() string {
	end := s.pos
	for end < len(s.src) && isIdentPart(s.src[end]) {
		end++
	}
	return strings.ToLower(s.src[s.pos:end])
}

// variable reads a Grafana variable: $name or ${name...}.
func (s *scanner) variable() {
	s.pos++ // $
	if !s.eof() && s.src[s.pos] == '{' {
		for !s.eof() && s.src[s.pos] != '}' {
			s.pos++
		}
		s.pos++
		return
	}
	s.word()
}

// until skips to just after the closing byte, returning what was between.
func (s *scanner) until(closing byte) (string, error) {
	start := s.pos
	i := strings.IndexByte(s.src[s.pos+1:], closing)
	if i < 0 {
		return "", fmt.Errorf("unclosed %q at %d", s.src[start], start)
	}
	s.pos += i + 2
	return s.src[start+1 : s.pos-1], nil
}

// str reads a quoted string and returns its value (escapes kept as written).
func (s *scanner) str() (string, error) {
	quote := s.src[s.pos]
	start := s.pos
	s.pos++
	for !s.eof() {
		c := s.src[s.pos]
		switch {
		case c == '\\' && quote != '`':
			s.pos += 2
			continue
		case c == quote:
			s.pos++
			return s.src[start+1 : s.pos-1], nil
		}
		s.pos++
	}
	return "", fmt.Errorf("unterminated string at %d", start)
}

// labelName reads the label name of a matcher: a bare identifier or a quoted name (UTF-8
// names, or a bare quoted metric name).
func (s *scanner) labelName() (string, error) {
	if q := s.src[s.pos]; q == '"' || q == '\'' {
		return s.str()
	}
	if !isIdentStart(s.src[s.pos]) {
		return "", fmt.Errorf("bad label matcher at %d", s.pos)
	}
	return s.word(), nil
}

// matchers reads a label matcher list {a="b", c=~"d"} and returns the metric name it sets with
// __name__="...", if any.
func (s *scanner) matchers() (string, error) {
	start := s.pos
	s.pos++ // {
	name := ""
	for {
		s.skipSpace()
		if s.eof() {
			return "", fmt.Errorf("unclosed { at %d", start)
		}
		if s.src[s.pos] == '}' {
			s.pos++
			return name, nil
		}
		if s.src[s.pos] == ',' {
			s.pos++
			continue
		}
		label, err := s.labelName()
		if err != nil {
			return "", err
		}
		s.skipSpace()
		opStart := s.pos
		for !s.eof() && strings.IndexByte("=!~", s.src[s.pos]) >= 0 {
			s.pos++
		}
		op := s.src[opStart:s.pos]
		if op == "" { // {"metric_name"}: a bare quoted name
			name = label
			continue
		}
		if op != "=" && op != "!=" && op != "=~" && op != "!~" {
			return "", fmt.Errorf("bad matcher operator %q at %d", op, opStart)
		}
		s.skipSpace()
		if s.eof() || strings.IndexByte("\"'`", s.src[s.pos]) < 0 {
			return "", fmt.Errorf("label %s: value must be a string at %d", label, s.pos)
		}
		value, err := s.str()
		if err != nil {
			return "", err
		}
		if label == "__name__" {
			if op != "=" {
				return "", fmt.Errorf("__name__%s%q: a metric name must be matched exactly to be checked", op, value)
			}
			name = value
		}
	}
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdentPart(c byte) bool  { return isIdentStart(c) || isDigit(c) }
