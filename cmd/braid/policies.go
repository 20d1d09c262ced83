package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

const policiesUsage = `usage: braid topic policies URI [--set JSON] [--unset KEY,KEY] [--json]
       braid namespace policies TENANT/NAMESPACE [--set JSON] [--unset KEY,KEY] [--json]

Without --set or --unset, show the stored and the effective policies. --set
changes the keys it names and keeps the others, live; --unset removes keys,
which then resolve from the namespace (or the broker default).

  braid topic policies topic://public/default/orders --set '{"split_msg_rate_in": 20000, "split_window": "5s"}'
`

// policiesCmd serves "topic policies" (namespace false) and "namespace
// policies".
func policiesCmd(args []string, namespace bool) error {
	fs := flag.NewFlagSet("policies", flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, policiesUsage) }
	var cf clientFlags
	cf.register(fs)
	set := fs.String("set", "", "policies to set, as JSON")
	unset := fs.String("unset", "", "comma-separated policy keys to remove")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("policies: want exactly one topic URI or namespace")
	}
	var p *api.Policies
	if *set != "" {
		p = &api.Policies{}
		dec := json.NewDecoder(strings.NewReader(*set))
		dec.DisallowUnknownFields()
		if err := dec.Decode(p); err != nil {
			return fmt.Errorf("--set: %w (keys: %s)", err, strings.Join(api.PolicyKeys(), ", "))
		}
	}
	var keys []string
	if *unset != "" {
		keys = strings.Split(*unset, ",")
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	adm := client.NewAdmin(nc, client.WithRequestTimeout(cf.timeout))
	ctx := context.Background()
	var reply api.PoliciesReply
	switch {
	case namespace && (p != nil || keys != nil):
		reply, err = adm.SetNamespacePolicies(ctx, pos[0], p, keys...)
	case namespace:
		reply, err = adm.NamespacePolicies(ctx, pos[0])
	case p != nil || keys != nil:
		reply, err = adm.SetTopicPolicies(ctx, pos[0], p, keys...)
	default:
		reply, err = adm.TopicPolicies(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(os.Stdout, reply)
	}
	printPolicies(os.Stdout, &reply.Policies, &reply.Effective)
	return nil
}

func namespaceCmd(args []string) error {
	if len(args) == 0 || args[0] != "policies" {
		fmt.Fprint(os.Stderr, policiesUsage)
		return errors.New("namespace: the only verb is policies")
	}
	return policiesCmd(args[1:], true)
}

// printPolicies prints every effective policy, one a line, marking with *
// those set at this level.
func printPolicies(w io.Writer, own, effective *api.Policies) {
	if effective == nil {
		return
	}
	values := func(p *api.Policies) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		if p != nil {
			b, _ := json.Marshal(p)
			_ = json.Unmarshal(b, &m)
		}
		return m
	}
	mine, eff := values(own), values(effective)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tVALUE\t")
	for _, k := range api.PolicyKeys() {
		v, ok := eff[k]
		if !ok {
			continue
		}
		mark := ""
		if _, set := mine[k]; set {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k, v, mark)
	}
	tw.Flush()
	fmt.Fprintln(w, "(* set at this level; the others resolve from the namespace or the broker default)")
}
