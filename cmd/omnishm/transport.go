//go:build linux

package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"omnishm/config"
	"omnishm/connector"
	_ "omnishm/natsconn" // registers NatsConnector with connector.New
)

// The flags that choose what carries a command's payloads, shared by send,
// recv, demo and bench (which has no --transport: its --transports lists
// what it times):
//
//	--transport shm|nats  /dev/shm (the default) or NATS JetStream
//	--url URL             the NATS server(s), over what --config says
//	--config FILE         the shared YAML configuration: a connector's settings
//	--connector NAME      the entry of FILE, when it holds several to choose from

// The --transport values, and the connector each names in a configuration.
const (
	transportSHM  = "shm"
	transportNats = "nats"
)

var connectorOf = map[string]string{transportSHM: config.SharedMemoryConnector, transportNats: config.NatsConnector}

type transportFlags struct {
	transport                   *string // nil for bench
	url, configPath, connectorN *string
}

// declareTransportFlags declares the flags on fs; urlHelp says what an
// absent --url means to the command.
func declareTransportFlags(fs *flag.FlagSet, withTransport bool, urlHelp string) transportFlags {
	t := transportFlags{
		url: fs.String("url", "", "NATS server URL, or several separated by commas (nats only); "+urlHelp),
		configPath: fs.String("config", "", "the shared YAML configuration file (its connectors section): the connector's\n"+
			"settings; flags given override them"),
		connectorN: fs.String("connector", "", "the connector of --config to use, by its name there, when it has several"),
	}
	if withTransport {
		t.transport = fs.String("transport", transportSHM, "what carries the payloads: shm (/dev/shm, this host) or nats (NATS JetStream)")
	}
	return t
}

// chosen returns the connector configuration the flags choose: an entry of
// --config (of the kind --transport names, when it is given; bench's, a
// NatsConnector), else the defaults of --transport; then --url over it. set
// holds the flags given. When ok is false the command must return code at
// once.
func (t transportFlags) chosen(inv *invocation, set map[string]bool) (c config.Connector, code int, ok bool) {
	kind := config.NatsConnector
	if t.transport != nil {
		kind = ""
		name, known := connectorOf[*t.transport]
		if !known {
			return c, inv.usageError("--transport %q: want %s or %s", *t.transport, transportSHM, transportNats), false
		}
		if set["transport"] || *t.configPath == "" {
			kind = name
		}
	}
	if c, code, ok = t.entry(inv, kind); !ok {
		return c, code, false
	}
	if set["url"] {
		if c.Name != config.NatsConnector {
			return c, inv.usageError("--url is for --transport %s", transportNats), false
		}
		c.Extra.Nats.URL = *t.url
	}
	if err := c.Validate(); err != nil {
		return c, inv.usageError("%v", err), false
	}
	return c, exitOK, true
}

// entry returns the connector of kind (a configuration name; "" for any)
// that --config and --connector select, or without --config the defaults of
// kind (the shared-memory connector's for "").
func (t transportFlags) entry(inv *invocation, kind string) (config.Connector, int, bool) {
	path, name := *t.configPath, *t.connectorN
	if path == "" {
		if name != "" {
			return config.Connector{}, inv.usageError("--connector needs --config"), false
		}
		if kind == config.NatsConnector {
			return config.Connector{Name: kind, Extra: config.Extra{StageID: config.NoStage}}, exitOK, true
		}
		return config.Default(), exitOK, true
	}
	cfg, err := config.Load(path)
	if err != nil {
		return config.Connector{}, inv.fail(err), false
	}
	if name != "" {
		c, found := cfg.Connectors[name]
		switch {
		case !found:
			return c, inv.usageError("--connector %q: %s has %s", name, path, strings.Join(slices.Sorted(maps.Keys(cfg.Connectors)), ", ")), false
		case kind != "" && c.Name != kind:
			return c, inv.usageError("--connector %q is a %s, not a %s", name, c.Name, kind), false
		}
		return c, exitOK, true
	}
	var names []string
	for n, c := range cfg.Connectors {
		if kind == "" || c.Name == kind {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	switch {
	case len(names) == 1:
		return cfg.Connectors[names[0]], exitOK, true
	case len(names) == 0 && kind != "":
		return config.Connector{}, inv.usageError("%s has no %s", path, kind), false
	case len(names) == 0:
		return config.Connector{}, inv.usageError("%s has no connector", path), false
	}
	return config.Connector{}, inv.usageError("%s has connectors %s: choose one with --connector", path, strings.Join(names, ", ")), false
}

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// openEndpoint opens c, through the connector factory, as stage ("" for a
// producer that receives nothing).
func openEndpoint(c config.Connector, stage string) (connector.Receiver, error) {
	c.Extra.StageID = config.NoStage
	if stage != "" {
		n, err := strconv.Atoi(stage)
		if err != nil || n < 0 || strconv.Itoa(n) != stage {
			return nil, fmt.Errorf("%w %q: want decimal digits, no leading zero", connector.ErrBadStage, stage)
		}
		c.Extra.StageID = n
	}
	return connector.New(c)
}
