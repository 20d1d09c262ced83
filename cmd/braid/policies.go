package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/spf13/cobra"
)

// policiesCommand is "topic policies" (namespace false) and "namespace
// policies".
func policiesCommand(e *cliEnv, namespace bool) *cobra.Command {
	use, what := "policies URI", "a topic's"
	if namespace {
		use, what = "policies TENANT/NAMESPACE", "a namespace's"
	}
	cmd := &cobra.Command{Use: use, Args: cobra.ExactArgs(1),
		Short: "show or change " + what + " policies (stored and effective)",
		Long: `Without --set or --unset, show the stored and the effective policies. --set
changes the keys it names and keeps the others, live; --unset removes keys,
which then resolve from the namespace (or the broker default).

  braid topic policies topic://public/default/orders --set '{"split_msg_rate_in": 20000, "split_window": "5s"}'`}
	set := cmd.Flags().String("set", "", "policies to set, as JSON")
	unset := cmd.Flags().StringSlice("unset", nil, "policy keys to remove, comma-separated")
	cmd.RunE = func(c *cobra.Command, args []string) error {
		var p *api.Policies
		if *set != "" {
			p = &api.Policies{}
			dec := json.NewDecoder(strings.NewReader(*set))
			dec.DisallowUnknownFields()
			if err := dec.Decode(p); err != nil {
				return usagef("--set: %v (keys: %s)", err, strings.Join(api.PolicyKeys(), ", "))
			}
		}
		keys := *unset
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			var reply api.PoliciesReply
			var err error
			switch {
			case namespace && (p != nil || keys != nil):
				reply, err = adm.SetNamespacePolicies(ctx, args[0], p, keys...)
			case namespace:
				reply, err = adm.NamespacePolicies(ctx, args[0])
			case p != nil || keys != nil:
				reply, err = adm.SetTopicPolicies(ctx, args[0], p, keys...)
			default:
				reply, err = adm.TopicPolicies(ctx, args[0])
			}
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(c.OutOrStdout(), reply)
			}
			printPolicies(c.OutOrStdout(), &reply.Policies, &reply.Effective)
			return nil
		})
	}
	return cmd
}

func namespaceCommand() *cobra.Command {
	cmd, e := newGroup("namespace", "create, list and delete namespaces, show or change their policies")
	create := e.verb("create TENANT/NAMESPACE", "create a namespace", cobra.ExactArgs(1), nil)
	policies := create.Flags().String("policies", "", "the namespace's policies as JSON")
	topicBuckets := create.Flags().Int("topic-buckets", 0, "metadata buckets the namespace's topics are spread over (default: the server's)")
	create.RunE = func(c *cobra.Command, args []string) error {
		if err := positive("topic-buckets", *topicBuckets, 0); err != nil {
			return err
		}
		var p *api.Policies
		if *policies != "" {
			p = &api.Policies{}
			if err := json.Unmarshal([]byte(*policies), p); err != nil {
				return usagef("--policies: %v", err)
			}
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			if err := adm.CreateNamespace(ctx, args[0], p, *topicBuckets); err != nil {
				return err
			}
			return e.done(c, "created namespace", args[0])
		})
	}
	list := e.verb("list TENANT", "list a tenant's namespaces", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			names, err := adm.ListNamespaces(ctx, args[0])
			return e.names(c, names, err)
		})
	del := e.verb("delete TENANT/NAMESPACE", "delete an empty namespace", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			if err := adm.DeleteNamespace(ctx, args[0]); err != nil {
				return err
			}
			return e.done(c, "deleted namespace", args[0])
		})
	cmd.AddCommand(create, list, del, policiesCommand(e, true))
	return cmd
}

func tenantCommand() *cobra.Command {
	cmd, e := newGroup("tenant", "create, list and delete tenants")
	create := e.verb("create TENANT", "create a tenant (the operator's to do on a secured server)", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			if err := adm.CreateTenant(ctx, args[0]); err != nil {
				return err
			}
			return e.done(c, "created tenant", args[0])
		})
	list := e.verb("list", "list the tenants (a tenant's account sees its own)", cobra.NoArgs,
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, _ []string) error {
			names, err := adm.ListTenants(ctx)
			return e.names(c, names, err)
		})
	del := e.verb("delete TENANT", "delete a tenant without namespaces (the operator's to do on a secured server)", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			if err := adm.DeleteTenant(ctx, args[0]); err != nil {
				return err
			}
			return e.done(c, "deleted tenant", args[0])
		})
	cmd.AddCommand(create, list, del)
	return cmd
}

// done prints the outcome of a create: a line, or {"ok":true,...}.
func (e *cliEnv) done(c *cobra.Command, what, name string) error {
	if e.out.json() {
		return printJSON(c.OutOrStdout(), map[string]any{"ok": true, "name": name})
	}
	fmt.Fprintln(c.OutOrStdout(), what, name)
	return nil
}

// names prints a list of names, one a line or as {"names":[...]}.
func (e *cliEnv) names(c *cobra.Command, names []string, err error) error {
	if err != nil {
		return err
	}
	if e.out.json() {
		return printJSON(c.OutOrStdout(), api.NameListReply{Names: append([]string{}, names...)})
	}
	for _, n := range names {
		fmt.Fprintln(c.OutOrStdout(), n)
	}
	return nil
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
