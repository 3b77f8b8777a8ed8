package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Parse reads a configuration. Other top-level sections of the file are
// ignored; inside `connectors` every field must be known and well typed,
// and every error names the field by its path, e.g.
// `connectors.shm.extra.host_ring_bytes: 100 is outside 0 or 4096..67108864`.
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &fieldError{field: "connectors", msg: "missing (empty document)"}
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, &fieldError{field: "(document)", line: root.Line, msg: "must be a mapping"}
	}
	var list *yaml.Node
	err := eachField(root, "", func(key string, value *yaml.Node) error {
		if key == "connectors" {
			list = value
		}
		return nil // the rest of the file is someone else's
	})
	if err != nil {
		return nil, err
	}
	if list == nil {
		return nil, &fieldError{field: "connectors", msg: "missing"}
	}
	if list.Kind != yaml.MappingNode {
		return nil, &fieldError{field: "connectors", line: list.Line, msg: "must be a mapping of connector names"}
	}
	cfg := &Config{Connectors: map[string]Connector{}}
	err = eachField(list, "connectors", func(key string, value *yaml.Node) error {
		c, err := parseConnector("connectors."+key, value)
		cfg.Connectors[key] = c
		return err
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

func parseConnector(path string, n *yaml.Node) (Connector, error) {
	c := Default()
	c.Name = ""
	if n.Kind != yaml.MappingNode {
		return c, &fieldError{field: path, line: n.Line, msg: "must be a mapping with name and extra"}
	}
	var nameLine int
	err := eachField(n, path, func(key string, value *yaml.Node) error {
		switch key {
		case "name":
			nameLine = value.Line
			return scalar(path+".name", value, "!!str", &c.Name)
		case "extra":
			return parseExtra(path+".extra", value, &c.Extra)
		}
		return &fieldError{field: path + "." + key, line: value.Line, msg: "unknown field (known: name, extra)"}
	})
	if err != nil {
		return c, err
	}
	if err := checkName(c.Name); err != nil {
		return c, at(err, path+".name", nameLine, n.Line)
	}
	return c, nil
}

func parseExtra(path string, n *yaml.Node, e *Extra) error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &fieldError{field: path, line: n.Line, msg: "must be a mapping"}
	}
	return eachField(n, path, func(key string, value *yaml.Node) error {
		field := path + "." + key
		if value.Tag == "!!null" {
			return nil // as if absent, like Python's extra.get(key)
		}
		switch key {
		case "host_ring_bytes":
			if err := scalar(field, value, "!!int", &e.HostRingBytes); err != nil {
				return err
			}
			return at(checkRingBytes(e.HostRingBytes), field, value.Line, 0)
		case "wakeup_scope":
			if err := scalar(field, value, "!!str", &e.WakeupScope); err != nil {
				return err
			}
			if e.WakeupScope == "" {
				// Python hashes "" as a scope; here empty means none. Refuse
				// rather than pick a different wake directory than the peer.
				return &fieldError{field: field, line: value.Line, msg: "empty (omit it for no scope)"}
			}
			return nil
		case "stage_id":
			if err := scalar(field, value, "!!int", &e.StageID); err != nil {
				return err
			}
			if e.StageID < 0 {
				return &fieldError{field: field, line: value.Line, msg: fmt.Sprintf("%d is negative (omit it for no stage)", e.StageID)}
			}
			return nil
		}
		return &fieldError{field: field, line: value.Line, msg: "unknown field (known: host_ring_bytes, wakeup_scope, stage_id)"}
	})
}

// at puts a Validate error at its place in the file.
func at(err error, field string, line, fallback int) error {
	fe, ok := err.(*fieldError)
	if !ok {
		return err
	}
	if line == 0 {
		line = fallback
	}
	return &fieldError{field: field, line: line, msg: fe.msg}
}

// eachField calls fn for every key of mapping m in order, refusing
// non-string and repeated keys.
func eachField(m *yaml.Node, path string, fn func(key string, value *yaml.Node) error) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := resolve(m.Content[i]), resolve(m.Content[i+1])
		where := path
		if where == "" {
			where = "(document)"
		}
		if k.Kind != yaml.ScalarNode {
			return &fieldError{field: where, line: k.Line, msg: "keys must be plain names"}
		}
		if seen[k.Value] {
			return &fieldError{field: join(path, k.Value), line: k.Line, msg: "repeated"}
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// scalar decodes n into v when n is a scalar with the wanted tag.
func scalar(field string, n *yaml.Node, tag string, v any) error {
	want := map[string]string{"!!str": "a string", "!!int": "an integer"}[tag]
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		got := n.ShortTag()
		if n.Kind == yaml.MappingNode {
			got = "a mapping"
		} else if n.Kind == yaml.SequenceNode {
			got = "a list"
		} else {
			got = fmt.Sprintf("%q (%s)", n.Value, got)
			if tag == "!!str" {
				got += "; quote it"
			}
		}
		return &fieldError{field: field, line: n.Line, msg: fmt.Sprintf("must be %s, got %s", want, got)}
	}
	if err := n.Decode(v); err != nil {
		return &fieldError{field: field, line: n.Line, msg: err.Error()}
	}
	return nil
}
