// policytable answers, for each probe (a source, a destination pod, a port), whether Kubernetes
// NetworkPolicies allow that TCP connection, using cyclonus's policy engine
// (github.com/mattfenwick/cyclonus v0.5.6, pkg/matcher: the engine behind `cyclonus analyze` and
// its simulated probes). This program only decodes the input, resolves each probe's port on the
// destination pod (a number to its container port name, a name to its number, as kubelet's
// container ports do) and encodes the engine's answers: no policy logic of its own.
//
// stdin (JSON):
//
//	{"policies": [networking.k8s.io/v1 NetworkPolicy, ...],
//	 "pods":     [{"name", "namespace", "labels", "namespaceLabels", "ports": {"<name>": <number>}, "ip"}],
//	 "sources":  [{"name", "namespace", "labels", "namespaceLabels", "ip"} | {"name", "ip"}],
//	 "probes":   [{"source", "pod", "port": <number or port name>, "protocol": "TCP"}]}
//
// A source without a namespace is outside the cluster (cyclonus: an external peer, matched only
// by ipBlock). Namespace labels are taken as given: kubernetes.io/metadata.name is the caller's
// to set, as the API server sets it on every namespace.
//
// stdout (JSON): {"verdicts": [{"source", "pod", "port", "portName", "protocol", "allowed",
// "ingress": {"allowedBy": [...], "deniedBy": [...]}, "egress": {...}}]}, one per probe in
// order; allowedBy/deniedBy name the policies (namespace/name) whose targets select the pod.
// Bad input exits 1 with one line on stderr naming the field.
//
// `policytable --sources` prints the SHA-256 of the files it was built from (main.go, go.mod,
// go.sum, embedded at build time), so a binary older than its sources is told apart by content,
// not by file times (which a checkout or a restored cache sets).
package main

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

//go:embed main.go go.mod go.sum
var sources embed.FS

// sourceDigests maps each embedded file to its SHA-256 (hex).
func sourceDigests() map[string]string {
	out := map[string]string{}
	for _, name := range []string{"main.go", "go.mod", "go.sum"} {
		data, err := sources.ReadFile(name)
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(data)
		out[name] = hex.EncodeToString(sum[:])
	}
	return out
}

type endpoint struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	Labels          map[string]string `json:"labels"`
	NamespaceLabels map[string]string `json:"namespaceLabels"`
	Ports           map[string]int    `json:"ports"`
	IP              string            `json:"ip"`
}

type probe struct {
	Source   string          `json:"source"`
	Pod      string          `json:"pod"`
	Port     json.RawMessage `json:"port"`
	Protocol string          `json:"protocol"`
}

type input struct {
	Policies []*networkingv1.NetworkPolicy `json:"policies"`
	Pods     []endpoint                    `json:"pods"`
	Sources  []endpoint                    `json:"sources"`
	Probes   []probe                       `json:"probes"`
}

type direction struct {
	AllowedBy []string `json:"allowedBy"`
	DeniedBy  []string `json:"deniedBy"`
}

type verdict struct {
	Source   string    `json:"source"`
	Pod      string    `json:"pod"`
	Port     int       `json:"port"`
	PortName string    `json:"portName"`
	Protocol string    `json:"protocol"`
	Allowed  bool      `json:"allowed"`
	Ingress  direction `json:"ingress"`
	Egress   direction `json:"egress"`
}

func peer(e endpoint) *matcher.TrafficPeer {
	if e.Namespace == "" {
		return &matcher.TrafficPeer{IP: e.IP}
	}
	return &matcher.TrafficPeer{
		IP: e.IP,
		Internal: &matcher.InternalPeer{
			PodLabels:       e.Labels,
			NamespaceLabels: e.NamespaceLabels,
			Namespace:       e.Namespace,
		},
	}
}

// resolve a probe's port on the destination pod: a number and the name of the container port
// that has it (or ""), or a name and its number.
func resolve(raw json.RawMessage, pod endpoint) (int, string, error) {
	var number int
	if err := json.Unmarshal(raw, &number); err == nil {
		for name, n := range pod.Ports {
			if n == number {
				return number, name, nil
			}
		}
		return number, "", nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return 0, "", fmt.Errorf("port %s: neither a number nor a port name", string(raw))
	}
	number, ok := pod.Ports[name]
	if !ok {
		return 0, "", fmt.Errorf("port %q: pod %s has no port of that name; name one of its ports", name, pod.Name)
	}
	return number, name, nil
}

func names(targets []*matcher.Target) []string {
	out := []string{}
	for _, t := range targets {
		for _, rule := range t.SourceRules {
			out = append(out, rule.Namespace+"/"+rule.Name)
		}
	}
	sort.Strings(out)
	return out
}

func byName(list []endpoint, what string) (map[string]endpoint, error) {
	out := map[string]endpoint{}
	for i, e := range list {
		if e.Name == "" {
			return nil, fmt.Errorf("%s[%d].name: missing; give every entry a unique name", what, i)
		}
		if _, dup := out[e.Name]; dup {
			return nil, fmt.Errorf("%s[%d].name: %q twice; names must be unique", what, i, e.Name)
		}
		out[e.Name] = e
	}
	return out, nil
}

func run(stdin io.Reader, stdout io.Writer) (err error) {
	// cyclonus panics on a policy it cannot build (e.g. no policyTypes): one line instead.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cyclonus refused the policies: %v", r)
		}
	}()
	data, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	// A field this version of networking/v1 does not know would be dropped silently.
	decoder.DisallowUnknownFields()
	var in input
	if err := decoder.Decode(&in); err != nil {
		return fmt.Errorf("stdin: %v; fix the input", err)
	}
	pods, err := byName(in.Pods, "pods")
	if err != nil {
		return err
	}
	sources, err := byName(in.Sources, "sources")
	if err != nil {
		return err
	}
	// Simplified as `cyclonus analyze` does by default (--simplify-policies=true).
	policy := matcher.BuildNetworkPolicies(true, in.Policies)
	out := struct {
		Verdicts []verdict `json:"verdicts"`
	}{Verdicts: []verdict{}}
	for i, p := range in.Probes {
		source, ok := sources[p.Source]
		if !ok {
			return fmt.Errorf("probes[%d].source: %q is no source; name one of sources", i, p.Source)
		}
		pod, ok := pods[p.Pod]
		if !ok {
			return fmt.Errorf("probes[%d].pod: %q is no pod; name one of pods", i, p.Pod)
		}
		if pod.Namespace == "" {
			return fmt.Errorf("pods: %q has no namespace; a destination is a pod in the cluster", pod.Name)
		}
		number, portName, err := resolve(p.Port, pod)
		if err != nil {
			return fmt.Errorf("probes[%d].%v", i, err)
		}
		protocol := p.Protocol
		if protocol == "" {
			protocol = string(v1.ProtocolTCP)
		}
		result := policy.IsTrafficAllowed(&matcher.Traffic{
			Source:           peer(source),
			Destination:      peer(pod),
			ResolvedPort:     number,
			ResolvedPortName: portName,
			Protocol:         v1.Protocol(protocol),
		})
		out.Verdicts = append(out.Verdicts, verdict{
			Source:   p.Source,
			Pod:      p.Pod,
			Port:     number,
			PortName: portName,
			Protocol: protocol,
			Allowed:  result.IsAllowed(),
			Ingress:  direction{names(result.Ingress.AllowingTargets), names(result.Ingress.DenyingTargets)},
			Egress:   direction{names(result.Egress.AllowingTargets), names(result.Egress.DenyingTargets)},
		})
	}
	encoder := json.NewEncoder(stdout)
	encoder.SetIndent("", " ")
	return encoder.Encode(out)
}

func main() {
	if len(os.Args) > 1 {
		if os.Args[1] == "--sources" {
			data, _ := json.Marshal(sourceDigests())
			fmt.Println(string(data))
			return
		}
		fmt.Fprintln(os.Stderr, "usage: policytable < input.json, or policytable --sources (see main.go); not "+strconv.Quote(os.Args[1]))
		os.Exit(2)
	}
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "policytable: "+err.Error())
		os.Exit(1)
	}
}
