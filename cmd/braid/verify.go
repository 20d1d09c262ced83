package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/braidmq/braid/api"
)

// printVerification shows topic.verify: one row per replica of each unit.
func printVerification(w io.Writer, v api.TopicVerification) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UNIT\tSTATE\tCOMPARED\tREPLICA\tFIRST\tNEXT\tCHECKSUM\tAGREE")
	for _, c := range v.Checks {
		agree := "yes"
		if !c.Agree {
			agree = "NO"
		}
		for i, r := range c.Replicas {
			sum := r.Checksum
			if len(sum) > 16 {
				sum = sum[:16]
			}
			if r.Error != "" {
				sum = "(no answer: " + r.Error + ")"
			}
			unit, state, span, ag := "", "", "", ""
			if i == 0 {
				unit, state, span, ag = fmt.Sprintf("%d/%d", c.Segment, c.Bucket), c.State, fmt.Sprintf("[%d, %d)", c.From, c.To), agree
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%d\t%d\t%s\t%s\n", unit, state, span, r.Node, r.Incarnation, r.First, r.Next, sum, ag)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s  epoch %d: %d units compared, %d disagree, %d with a replica not answering\n",
		v.Topic, v.Epoch, v.Units, v.Disagree, v.Unanswered)
}
