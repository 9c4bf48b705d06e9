// Command nfd-worker runs node-feature-discovery's worker
// (sigs.k8s.io/node-feature-discovery/pkg/nfd-worker) once against a fixture
// host root and writes the labels it would publish as JSON.
//
// Upstream bakes the host path prefix in at build time
// (hostpath.pathPrefix, "/host-" in its image); here -host-root sets the same
// hostpath directories at run time, so one binary serves any fixture tree.
// Flags mirror upstream's (-oneshot, -no-publish, -label-sources,
// -feature-sources, -config, -options); -labels-out is ours.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	k8sclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	worker "sigs.k8s.io/node-feature-discovery/pkg/nfd-worker"
	"sigs.k8s.io/node-feature-discovery/pkg/utils"
	"sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath"
)

// labelSink passes klog output to stderr and catches the worker's
// "feature discovery completed" record, whose "labels" value is the label set.
type labelSink struct {
	labels *map[string]string
	err    *error
}

func (s labelSink) Init(logr.RuntimeInfo)          {}
func (s labelSink) Enabled(int) bool               { return true }
func (s labelSink) WithName(string) logr.LogSink   { return s }
func (s labelSink) WithValues(...any) logr.LogSink { return s }
func (s labelSink) Error(err error, msg string, kv ...any) {
	fmt.Fprintf(os.Stderr, "E %q err=%v %v\n", msg, err, kv)
}
func (s labelSink) Info(_ int, msg string, kv ...any) {
	if msg == "feature discovery completed" {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "labels" {
				m := map[string]string{}
				if err := yaml.Unmarshal([]byte(fmt.Sprint(kv[i+1])), &m); err != nil {
					*s.err = err
				}
				*s.labels = m
				return
			}
		}
	}
	fmt.Fprintf(os.Stderr, "I %q %v\n", msg, kv)
}

func main() {
	fs := flag.NewFlagSet("nfd-worker", flag.ExitOnError)
	hostRoot := fs.String("host-root", "/", "directory holding the host's sys/, proc/, etc/, usr/, lib/, var/, boot/")
	out := fs.String("labels-out", "-", "write the labels as JSON here (- for stdout)")
	args := &worker.Args{Overrides: worker.ConfigOverrideArgs{
		FeatureSources: &utils.StringSliceVal{},
		LabelSources:   &utils.StringSliceVal{},
	}}
	fs.StringVar(&args.ConfigFile, "config", "/nonexistent/nfd-worker.conf", "config file")
	fs.StringVar(&args.Options, "options", "", "config options (json/yaml), as upstream")
	fs.BoolVar(&args.Oneshot, "oneshot", true, "run discovery once (always on here)")
	args.Overrides.NoPublish = fs.Bool("no-publish", true, "do not publish (always on here)")
	fs.Var(args.Overrides.FeatureSources, "feature-sources", "comma separated feature sources")
	fs.Var(args.Overrides.LabelSources, "label-sources", "comma separated label sources")
	fs.IntVar(&args.MetricsPort, "metrics", 0, "metrics port (0 = off)")
	fs.IntVar(&args.GrpcHealthPort, "grpc-health", 0, "grpc health port (0 = off)")
	_ = fs.Parse(os.Args[1:])
	if !args.Oneshot || !*args.Overrides.NoPublish {
		fmt.Fprintln(os.Stderr, "nfd-worker (harness build) only supports -oneshot -no-publish")
		os.Exit(2)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["feature-sources"] {
		args.Overrides.FeatureSources = nil // config file / defaults decide
	}
	if !set["label-sources"] {
		args.Overrides.LabelSources = nil
	}

	root, err := filepath.Abs(*hostRoot)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	hostpath.BootDir = hostpath.HostDir(filepath.Join(root, "boot"))
	hostpath.EtcDir = hostpath.HostDir(filepath.Join(root, "etc"))
	hostpath.SysfsDir = hostpath.HostDir(filepath.Join(root, "sys"))
	hostpath.UsrDir = hostpath.HostDir(filepath.Join(root, "usr"))
	hostpath.VarDir = hostpath.HostDir(filepath.Join(root, "var"))
	hostpath.LibDir = hostpath.HostDir(filepath.Join(root, "lib"))
	hostpath.ProcDir = hostpath.HostDir(filepath.Join(root, "proc"))

	var labels map[string]string
	var parseErr error
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("v", "1") // the worker dumps its labels at V(1)
	klog.SetLogger(logr.New(labelSink{labels: &labels, err: &parseErr}))

	// Never contacted with -no-publish; the worker only wants a client object.
	cli, err := k8sclient.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w, err := worker.NewNfdWorker(worker.WithArgs(args), worker.WithKubernetesClient(cli))
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	if err := w.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
	if parseErr != nil || labels == nil {
		fmt.Fprintln(os.Stderr, "no labels captured:", parseErr)
		os.Exit(1)
	}
	b, _ := json.MarshalIndent(labels, "", "  ")
	b = append(b, '\n')
	if *out == "-" {
		os.Stdout.Write(b)
		return
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
