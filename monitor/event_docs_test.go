package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fused event's one alarm state is described in three places that
// users read: the README, the event's schema version and the Grafana
// dashboard. They must agree: the README documents the current version as
// this release's, every alarm panel reads an alarm signal, and a panel
// that shows a detail signal says it is not an alarm.
func TestAlarmStateDocsAgree(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	doc := string(readme)
	// has reports whether the README holds s, without printing the README.
	has := func(s, why string, args ...any) {
		t.Helper()
		require.True(t, strings.Contains(doc, s), "README lacks %q: %s", s, fmt.Sprintf(why, args...))
	}
	has("### The fused event (`"+EventSchema+"`)", "the heading names the current schema")
	has(`"schema": "`+EventSchema+`"`, "the example event has the current schema")
	version := EventSchema[strings.LastIndex(EventSchema, "/")+1:]
	has("**"+version+"** (this release)", "the version history starts at the current version")

	// Detail signals as the code emits them: never exceeded, whatever
	// their score.
	r := DriftResult{Ready: true, PSIMax: 0.01, KSPCorrected: 0, CentroidCosine: 0.9}
	details := map[string]bool{}
	for _, s := range append(driftSignals(TagDrift, r), corpusSignals(r)...) {
		if s.sig.Method != "psi_max" {
			require.False(t, s.sig.Exceeded, s.sig.Method)
			details[s.sig.Method] = true
		}
	}
	for m := range details {
		has("`"+m+"`", "it names detail signal %s", m)
	}
	has("`exceeded` is the alarm state and nothing else", "it says what exceeded means")

	b, err := os.ReadFile("../compose/grafana/dashboards/ragsync-monitor.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title       string `json:"title"`
			Description string `json:"description"`
			Targets     []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	method := regexp.MustCompile(`method=~?"([^"]*)"`)
	alarmPanels := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			var methods []string
			if m := method.FindStringSubmatch(tg.Expr); m != nil {
				methods = strings.Split(m[1], "|")
			}
			if strings.Contains(tg.Expr, "ragsync_monitor_alarm") {
				alarmPanels++
				for _, m := range methods {
					require.False(t, details[m], "panel %q shows detail signal %s as an alarm", p.Title, m)
				}
				continue
			}
			for _, m := range methods {
				if details[m] {
					require.Contains(t, p.Title+" "+p.Description, "not alarms", "panel %q shows detail signal %s without saying it is not an alarm", p.Title, m)
				}
			}
		}
	}
	require.Positive(t, alarmPanels, "the dashboard has alarm panels")
}
