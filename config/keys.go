package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ragsync/ragsync/internal/suggest"
	"go.yaml.in/yaml/v3"
)

// unknownKeys walks the YAML document against Config and reports every key
// that names no setting with its YAML path and line, and the closest valid
// key: the decoder's own error names Go types ("field target_token not found
// in type config.ChunkerConfig"), which the user never wrote.
func unknownKeys(doc *yaml.Node) error {
	if doc == nil || len(doc.Content) == 0 {
		return nil
	}
	var errs []error
	walkKeys(doc.Content[0], reflect.TypeOf(Config{}), "", &errs)
	return errors.Join(errs...)
}

func walkKeys(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.AliasNode:
		return
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			walkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(time.Time{}) && n.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			ft, ok := fields[k.Value]
			if !ok {
				if k.Value == "<<" { // a merge key: its fields are checked where they are defined
					continue
				}
				msg := fmt.Sprintf("%s (line %d): unknown setting", p, k.Line)
				if s := closest(k.Value, fields); s != "" {
					msg += fmt.Sprintf("; did you mean %s?", s)
				} else {
					msg += "; see the README's Configuration section for the settings"
				}
				*errs = append(*errs, errors.New(msg))
				continue
			}
			walkKeys(v, ft, p, errs)
		}
	}
}

// yamlFields maps the YAML names of t's fields, inlined structs included,
// to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if opts == "inline" {
			for k, v := range yamlFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}

// closest returns the valid key nearest to k by edit distance, if it is
// near enough to be a typo.
func closest(k string, fields map[string]reflect.Type) string {
	return suggest.Nearest(k, slices.Collect(maps.Keys(fields)))
}

// envNames lists every setting's path as a RAGSYNC_* variable spells it,
// lower-case, without the prefix (embedder_api_key).
func envNames(t reflect.Type, prefix string, out []string) []string {
	for name, ft := range yamlFields(t) {
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}) {
			out = envNames(ft, prefix+name+"_", out)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// errUnknownSetting is a --set path or RAGSYNC_* name that names no setting.
var errUnknownSetting = errors.New("unknown setting")

// unknownSetting reports a --set path (or RAGSYNC_* name) that names no
// setting; for --set it offers the closest key at the level that failed.
func unknownSetting(v reflect.Value, path, rest string, underscores bool) error {
	if underscores {
		// The variable's name is the whole path: suggest the nearest of all
		// (Load does, with the RAGSYNC_ prefix).
		return fmt.Errorf("%w %q", errUnknownSetting, path)
	}
	key, _, _ := strings.Cut(rest, ".")
	if s := closest(key, yamlFields(v.Type())); s != "" {
		return fmt.Errorf("%w %q; did you mean %s?", errUnknownSetting, path, strings.TrimSuffix(path, rest)+s)
	}
	return fmt.Errorf("%w %q", errUnknownSetting, path)
}
