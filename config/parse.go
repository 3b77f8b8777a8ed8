package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

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
	c := Connector{Extra: Extra{StageID: NoStage}}
	if n.Kind != yaml.MappingNode {
		return c, &fieldError{field: path, line: n.Line, msg: "must be a mapping with name and extra"}
	}
	var nameLine int
	var extra *yaml.Node
	err := eachField(n, path, func(key string, value *yaml.Node) error {
		switch key {
		case "name":
			nameLine = value.Line
			return scalar(path+".name", value, "!!str", &c.Name)
		case "extra":
			extra = value // read once the name says which settings exist
			return nil
		}
		return &fieldError{field: path + "." + key, line: value.Line, msg: "unknown field (known: name, extra)"}
	})
	if err != nil {
		return c, err
	}
	if err := checkName(c.Name); err != nil {
		return c, at(err, path+".name", nameLine, n.Line)
	}
	if c.Name == SharedMemoryConnector {
		c.Extra = Default().Extra
	}
	if extra != nil {
		err = parseExtra(path+".extra", extra, c.Name, &c.Extra)
	}
	return c, err
}

// extraFields lists each connector's `extra` settings, in the order errors
// name them.
var extraFields = map[string][]string{
	SharedMemoryConnector: {"host_ring_bytes", "wakeup_scope", "stage_id"},
	NatsConnector:         {"url", "credentials", "bucket", "object_store", "max_age", "timeout", "replicas", "storage", "stage_id"},
}

func parseExtra(path string, n *yaml.Node, name string, e *Extra) error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &fieldError{field: path, line: n.Line, msg: "must be a mapping"}
	}
	known := extraFields[name]
	return eachField(n, path, func(key string, value *yaml.Node) error {
		field := path + "." + key
		if value.Tag == "!!null" {
			return nil // as if absent, like Python's extra.get(key)
		}
		if !slices.Contains(known, key) {
			return &fieldError{field: field, line: value.Line, msg: fmt.Sprintf("unknown field of a %s (known: %s)", name, strings.Join(known, ", "))}
		}
		switch key {
		case "host_ring_bytes":
			if err := scalar(field, value, "!!int", &e.HostRingBytes); err != nil {
				return err
			}
			return at(checkRingBytes(e.HostRingBytes), field, value.Line, 0)
		case "wakeup_scope":
			// Python hashes "" as a scope; here empty means none. Refuse
			// rather than pick a different wake directory than the peer.
			return nonEmpty(field, value, &e.WakeupScope, "omit it for no scope")
		case "stage_id":
			if err := scalar(field, value, "!!int", &e.StageID); err != nil {
				return err
			}
			if e.StageID < 0 {
				return &fieldError{field: field, line: value.Line, msg: fmt.Sprintf("%d is negative (omit it for no stage)", e.StageID)}
			}
			return nil
		case "url":
			if err := nonEmpty(field, value, &e.Nats.URL, "omit it for the default"); err != nil {
				return err
			}
			return at(checkURL(e.Nats.URL), field, value.Line, 0)
		case "credentials":
			return nonEmpty(field, value, &e.Nats.Credentials, "omit it for none")
		case "bucket":
			if err := nonEmpty(field, value, &e.Nats.Bucket, "omit it for the default"); err != nil {
				return err
			}
			return at(checkBucket(field, e.Nats.Bucket), field, value.Line, 0)
		case "object_store":
			if err := nonEmpty(field, value, &e.Nats.ObjectStore, "omit it for the default"); err != nil {
				return err
			}
			return at(checkBucket(field, e.Nats.ObjectStore), field, value.Line, 0)
		case "max_age":
			return duration(field, value, &e.Nats.MaxAge, time.Second)
		case "timeout":
			return duration(field, value, &e.Nats.Timeout, time.Millisecond)
		case "replicas":
			if err := scalar(field, value, "!!int", &e.Nats.Replicas); err != nil {
				return err
			}
			if e.Nats.Replicas < 1 {
				return &fieldError{field: field, line: value.Line, msg: fmt.Sprintf("%d is outside 1..%d", e.Nats.Replicas, MaxNatsReplicas)}
			}
			return at(checkReplicas(e.Nats.Replicas), field, value.Line, 0)
		case "storage":
			if err := scalar(field, value, "!!str", &e.Nats.Storage); err != nil {
				return err
			}
			return at(checkStorage(e.Nats.Storage), field, value.Line, 0)
		}
		return nil
	})
}

// nonEmpty decodes a string setting for which "" would be ambiguous.
func nonEmpty(field string, n *yaml.Node, v *string, absent string) error {
	if err := scalar(field, n, "!!str", v); err != nil {
		return err
	}
	if *v == "" {
		return &fieldError{field: field, line: n.Line, msg: "empty (" + absent + ")"}
	}
	return nil
}

// duration decodes a Go duration string such as "10m" or "1.5s", of at
// least least.
func duration(field string, n *yaml.Node, d *time.Duration, least time.Duration) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		got := n.Value
		if n.Kind != yaml.ScalarNode {
			got = "a " + map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[n.Kind]
		}
		return &fieldError{field: field, line: n.Line, msg: fmt.Sprintf(`must be a duration such as "10m" or "1.5s", got %s`, got)}
	}
	if v < least {
		return &fieldError{field: field, line: n.Line, msg: fmt.Sprintf("%v is under %v", v, least)}
	}
	*d = v
	return nil
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
