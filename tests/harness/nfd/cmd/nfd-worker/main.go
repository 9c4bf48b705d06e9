// Command nfd-worker runs node-feature-discovery's worker
// (sigs.k8s.io/node-feature-discovery/pkg/nfd-worker) in one of two ways:
//
//   - once (-oneshot -no-publish, the default) against a fixture host root,
//     writing the labels it would publish as JSON (-labels-out);
//   - as upstream's daemon (-oneshot=false -no-publish=false -kubeconfig=...):
//     it publishes its NodeFeature object and follows features.d with the
//     local source's fsnotify watch, exactly as a deployed nfd-worker does.
//
// Upstream bakes the host path prefix in at build time
// (hostpath.pathPrefix, "/host-" in its image); here -host-root sets the same
// hostpath directories at run time, so one binary serves any fixture tree.
// The local source's directory is a package variable with no flag upstream
// (source/local/local.go: featureFilesDir); -features-dir sets it.
// Flags mirror upstream's (-oneshot, -no-publish, -label-sources,
// -feature-sources, -config, -options, -kubeconfig, -port); -labels-out,
// -host-root, -features-dir and -v are ours.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	_ "unsafe" // go:linkname

	"github.com/go-logr/logr"
	k8sclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	worker "sigs.k8s.io/node-feature-discovery/pkg/nfd-worker"
	"sigs.k8s.io/node-feature-discovery/pkg/utils"
	"sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath"
	_ "sigs.k8s.io/node-feature-discovery/source/local"
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

// featureFilesDir is the local source's directory (upstream: a constant path, no flag).
//
//go:linkname featureFilesDir sigs.k8s.io/node-feature-discovery/source/local.featureFilesDir
var featureFilesDir string

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
	fs.BoolVar(&args.Oneshot, "oneshot", true, "run discovery once")
	args.Overrides.NoPublish = fs.Bool("no-publish", true, "do not publish")
	fs.Var(args.Overrides.FeatureSources, "feature-sources", "comma separated feature sources")
	fs.Var(args.Overrides.LabelSources, "label-sources", "comma separated label sources")
	fs.StringVar(&args.Kubeconfig, "kubeconfig", "", "kubeconfig (the daemon mode publishes with it)")
	fs.IntVar(&args.Port, "port", 0, "metrics and healthz port of the daemon mode (0: any free port)")
	featuresDir := fs.String("features-dir", "", "the local source's features.d (default: upstream's)")
	verbosity := fs.String("v", "1", "klog verbosity of the daemon mode")
	_ = fs.Parse(os.Args[1:])
	daemon := !args.Oneshot && !*args.Overrides.NoPublish
	if !daemon && !(args.Oneshot && *args.Overrides.NoPublish) {
		fmt.Fprintln(os.Stderr, "nfd-worker (harness build) runs -oneshot -no-publish, or -oneshot=false -no-publish=false -kubeconfig=...")
		os.Exit(2)
	}
	if daemon && args.Kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "nfd-worker (harness build): the daemon mode needs -kubeconfig")
		os.Exit(2)
	}
	if *featuresDir != "" {
		d, err := filepath.Abs(*featuresDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		featureFilesDir = d + "/"
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

	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	if daemon { // upstream's worker, its own client and log, until it is killed
		_ = kfs.Set("v", *verbosity)
		runWorker(worker.WithArgs(args))
		return
	}

	var labels map[string]string
	var parseErr error
	_ = kfs.Set("v", "1") // the worker dumps its labels at V(1)
	klog.SetLogger(logr.New(labelSink{labels: &labels, err: &parseErr}))

	// Never contacted with -no-publish; the worker only wants a client object.
	cli, err := k8sclient.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runWorker(worker.WithArgs(args), worker.WithKubernetesClient(cli))
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

// runWorker runs upstream's worker with opts until it returns; any error ends the process.
func runWorker(opts ...worker.NfdWorkerOption) {
	w, err := worker.NewNfdWorker(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	if err := w.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}
