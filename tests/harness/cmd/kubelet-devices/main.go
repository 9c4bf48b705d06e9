// Command kubelet-devices runs the kubelet's own device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) on a plugin directory of
// our choosing, so device plugins can be tested against the real kubelet code:
// registration validation, the plugin dial, ListAndWatch, capacity accounting,
// device selection, Allocate and checkpointing.
//
// Protocol: JSON lines. Events go to stdout, one object per line, each with
// "event" and "ts" (CLOCK_MONOTONIC seconds, comparable with Python's
// time.monotonic()). Commands are read from stdin, one object per line, each
// with "cmd" and an optional "id" that is echoed in the "response" event.
// Logs go to stderr (-v sets klog verbosity).
//
// Events: ready, registered, devices, capacity, disconnected, error, response,
// stopped.
// Commands: allocate, preferred, capacity, release, restart, stop.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// newManagerImpl is the device manager constructor the kubelet uses, minus the
// hard-coded /var/lib/kubelet/device-plugins/kubelet.sock (NewManagerImpl only
// adds that path). Its own unit tests use it the same way.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

const (
	checkpointName = "kubelet_internal_checkpoint" // devicemanager.kubeletDeviceManagerCheckpoint
	containerName  = "c"
)

// ---------------------------------------------------------------- output

var outMu sync.Mutex

func monotonic() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func emit(event string, fields map[string]any) {
	m := map[string]any{}
	for k, v := range fields {
		m[k] = v
	}
	m["event"] = event
	m["ts"] = monotonic()
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"event": "error", "ts": monotonic(), "msg": "cannot encode event", "error": err.Error()})
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// eventSink is a logr sink: every logger.Error of the kubelet code (e.g. a
// rejected registration, a failed dial, ListAndWatch ending) becomes an
// "error" event; everything is also logged to stderr up to -v.
type eventSink struct {
	verbosity int
	name      string
	kv        []any
}

func (s *eventSink) Init(logr.RuntimeInfo)  {}
func (s *eventSink) Enabled(level int) bool { return level <= s.verbosity }
func (s *eventSink) WithName(n string) logr.LogSink {
	c := *s
	c.name = strings.Trim(s.name+"/"+n, "/")
	return &c
}
func (s *eventSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.kv = append(append([]any{}, s.kv...), kv...)
	return &c
}
func (s *eventSink) Info(level int, msg string, kv ...any) {
	fmt.Fprintf(os.Stderr, "I %s %q %v %v\n", s.name, msg, s.kv, kv)
}
func (s *eventSink) Error(err error, msg string, kv ...any) {
	all := append(append([]any{}, s.kv...), kv...)
	fmt.Fprintf(os.Stderr, "E %s %q err=%v %v\n", s.name, msg, err, all)
	if err != nil && strings.Contains(err.Error(), "checkpoint is not found") {
		return // a first start has no checkpoint yet; not worth an event
	}
	fields := map[string]any{"msg": msg, "source": "kubelet"}
	if err != nil {
		fields["error"] = err.Error()
	}
	ctx := map[string]string{}
	for i := 0; i+1 < len(all); i += 2 {
		ctx[fmt.Sprint(all[i])] = fmt.Sprint(all[i+1])
	}
	fields["context"] = ctx
	if r, ok := ctx["resourceName"]; ok {
		fields["resource"] = r
	} else if r, ok := ctx["resource"]; ok {
		fields["resource"] = r
	}
	emit("error", fields)
}

// ---------------------------------------------------------------- plugin hooks

// recordingClient is the kubelet's gRPC client of one plugin; it only
// remembers the options the kubelet fetched at registration.
type recordingClient struct {
	pluginapi.DevicePluginClient
	mu   sync.Mutex
	opts *pluginapi.DevicePluginOptions
}

func (c *recordingClient) GetDevicePluginOptions(ctx context.Context, in *pluginapi.Empty, o ...grpc.CallOption) (*pluginapi.DevicePluginOptions, error) {
	r, err := c.DevicePluginClient.GetDevicePluginOptions(ctx, in, o...)
	if err == nil {
		c.mu.Lock()
		c.opts = r
		c.mu.Unlock()
	}
	return r, err
}

type recordingPlugin struct {
	plugin.DevicePlugin
	client *recordingClient
}

func (p *recordingPlugin) API() pluginapi.DevicePluginClient { return p.client }

type resourceState struct {
	healthy, unhealthy []string
	client             *recordingClient
	socket             string
}

// harness owns the manager and forwards the plugin server's callbacks to it,
// emitting events on the way.
type harness struct {
	dir        string
	socketName string
	logger     klog.Logger

	mu        sync.Mutex // guards everything below
	mgr       *devicemanager.ManagerImpl
	pods      map[types.UID]*v1.Pod // "running" pods holding allocations
	resources map[string]*resourceState
	lastCap   map[string][2]int64
	restarts  int

	lifecycle sync.Mutex // serialises start/stop/restart
	doneOnce  sync.Once
}

func (h *harness) manager() *devicemanager.ManagerImpl {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mgr
}

func (h *harness) CleanupPluginDirectory(l klog.Logger, dir string) error {
	return h.manager().CleanupPluginDirectory(l, dir)
}

func (h *harness) PluginConnected(ctx context.Context, res string, p plugin.DevicePlugin) error {
	rc := &recordingClient{DevicePluginClient: p.API()}
	if err := h.manager().PluginConnected(ctx, res, &recordingPlugin{DevicePlugin: p, client: rc}); err != nil {
		emit("error", map[string]any{"msg": "registration failed", "resource": res, "error": err.Error(), "source": "kubelet"})
		return err
	}
	h.mu.Lock()
	st := h.resources[res]
	if st == nil {
		st = &resourceState{}
		h.resources[res] = st
	}
	st.client = rc
	st.socket = p.SocketPath()
	h.mu.Unlock()
	opts := map[string]any{}
	rc.mu.Lock()
	if rc.opts != nil {
		opts["pre_start_required"] = rc.opts.PreStartRequired
		opts["get_preferred_allocation_available"] = rc.opts.GetPreferredAllocationAvailable
	}
	rc.mu.Unlock()
	emit("registered", map[string]any{
		"resource": res,
		"endpoint": filepath.Base(p.SocketPath()),
		"socket":   p.SocketPath(),
		"options":  opts,
	})
	return nil
}

func (h *harness) PluginDisconnected(l klog.Logger, res, socket string) {
	h.manager().PluginDisconnected(l, res, socket)
	emit("disconnected", map[string]any{"resource": res, "endpoint": filepath.Base(socket), "socket": socket})
	h.checkCapacity()
}

func (h *harness) PluginListAndWatchReceiver(l klog.Logger, res string, resp *pluginapi.ListAndWatchResponse) {
	h.manager().PluginListAndWatchReceiver(l, res, resp)
	healthy, unhealthy := []string{}, []string{}
	devs := []map[string]any{}
	for _, d := range resp.Devices {
		if d.Health == pluginapi.Healthy {
			healthy = append(healthy, d.ID)
		} else {
			unhealthy = append(unhealthy, d.ID)
		}
		dm := map[string]any{"id": d.ID, "health": d.Health}
		if d.Topology != nil {
			numa := []int64{}
			for _, n := range d.Topology.Nodes {
				numa = append(numa, n.ID)
			}
			dm["numa"] = numa
		}
		devs = append(devs, dm)
	}
	sort.Strings(healthy)
	sort.Strings(unhealthy)
	h.mu.Lock()
	st := h.resources[res]
	if st == nil {
		st = &resourceState{}
		h.resources[res] = st
	}
	st.healthy, st.unhealthy = healthy, unhealthy
	h.mu.Unlock()
	emit("devices", map[string]any{"resource": res, "healthy": healthy, "unhealthy": unhealthy, "devices": devs})
	h.checkCapacity()
}

// checkCapacity asks the manager for capacity (as the kubelet's node status
// loop does) and emits "capacity" for each resource whose numbers changed.
func (h *harness) checkCapacity() (map[string]int64, map[string]int64) {
	mgr := h.manager()
	if mgr == nil {
		return nil, nil
	}
	capList, allocList, deleted := mgr.GetCapacity(h.logger)
	capacity, allocatable := map[string]int64{}, map[string]int64{}
	for r, q := range capList {
		capacity[string(r)] = q.Value()
	}
	for r, q := range allocList {
		allocatable[string(r)] = q.Value()
	}
	h.mu.Lock()
	var changed []map[string]any
	for r, c := range capacity {
		now := [2]int64{c, allocatable[r]}
		if old, ok := h.lastCap[r]; !ok || old != now {
			h.lastCap[r] = now
			changed = append(changed, map[string]any{"resource": r, "capacity": now[0], "allocatable": now[1]})
		}
	}
	for _, r := range deleted {
		if _, ok := capacity[r]; ok {
			continue
		}
		delete(h.lastCap, r)
		changed = append(changed, map[string]any{"resource": r, "capacity": 0, "allocatable": 0, "removed": true})
	}
	h.mu.Unlock()
	for _, c := range changed {
		emit("capacity", c)
	}
	return capacity, allocatable
}

// ---------------------------------------------------------------- lifecycle

func (h *harness) activePods() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*v1.Pod, 0, len(h.pods))
	for _, p := range h.pods {
		out = append(out, p)
	}
	return out
}

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

func (h *harness) start() error {
	socket := filepath.Join(h.dir, h.socketName)
	mgr, err := newManagerImpl(h.logger, socket, nil, topologymanager.NewFakeManager(h.logger))
	if err != nil {
		return err
	}
	// Route the registration server's callbacks through h (which calls the
	// manager's own handlers) so events can be emitted. The server is the
	// kubelet's plugin/v1beta1 server; only its handler is ours.
	srv, err := plugin.NewServer(h.logger, socket, h, h)
	if err != nil {
		return err
	}
	f := reflect.ValueOf(mgr).Elem().FieldByName("server")
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(srv))

	h.mu.Lock()
	h.mgr = mgr
	h.lastCap = map[string][2]int64{}
	h.resources = map[string]*resourceState{}
	h.mu.Unlock()
	if err := mgr.Start(h.logger, h.activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return err
	}
	emit("ready", map[string]any{"socket": socket, "dir": h.dir, "restarts": h.restarts})
	return nil
}

func (h *harness) stop() {
	mgr := h.manager()
	if mgr == nil {
		return
	}
	if err := mgr.Stop(h.logger); err != nil {
		emit("error", map[string]any{"msg": "stop failed", "error": err.Error()})
	}
	h.mu.Lock()
	h.mgr = nil
	h.mu.Unlock()
}

// ---------------------------------------------------------------- commands

type command struct {
	ID          any      `json:"id"`
	Cmd         string   `json:"cmd"`
	Resource    string   `json:"resource"`
	Count       *int     `json:"count"`
	Devices     []string `json:"devices"`
	Available   []string `json:"available"`
	MustInclude []string `json:"must_include"`
	Size        int      `json:"size"`
	PodUID      string   `json:"pod_uid"`
	Delay       float64  `json:"delay"`
}

var marshal = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func protoMap(m proto.Message) map[string]any {
	b, err := marshal.Marshal(m)
	if err != nil {
		return map[string]any{"marshal_error": err.Error()}
	}
	out := map[string]any{}
	_ = json.Unmarshal(b, &out)
	return out
}

func (h *harness) client(res string) (*recordingClient, *resourceState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.resources[res]
	if st == nil || st.client == nil {
		return nil, nil, fmt.Errorf("resource %q is not registered", res)
	}
	cp := *st
	return st.client, &cp, nil
}

func (h *harness) allocate(c command) (map[string]any, error) {
	if c.Resource == "" {
		return nil, errors.New("allocate needs a resource")
	}
	if len(c.Devices) > 0 {
		// The kubelet chooses device IDs itself; to ask for explicit IDs we
		// send the Allocate RPC on the kubelet's own connection to the plugin.
		rc, _, err := h.client(c.Resource)
		if err != nil {
			return nil, err
		}
		resp, err := rc.Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: c.Devices}},
		})
		if err != nil {
			return nil, err
		}
		out := map[string]any{"direct": true, "device_ids": c.Devices, "container_responses": []any{}}
		var crs []any
		for _, cr := range resp.ContainerResponses {
			crs = append(crs, protoMap(cr))
		}
		out["container_responses"] = crs
		if len(resp.ContainerResponses) > 0 {
			for k, v := range protoMap(resp.ContainerResponses[0]) {
				out[k] = v
			}
		}
		return out, nil
	}
	n := 1
	if c.Count != nil {
		n = *c.Count
	}
	mgr := h.manager()
	if mgr == nil {
		return nil, errors.New("device manager is stopped")
	}
	q := resource.NewQuantity(int64(n), resource.DecimalSI)
	uid := uuid.NewUUID()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "alloc-" + string(uid)[:8], Namespace: "default", UID: uid},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: containerName,
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceName(c.Resource): *q},
				Requests: v1.ResourceList{v1.ResourceName(c.Resource): *q},
			},
		}}},
	}
	h.mu.Lock()
	h.pods[uid] = pod
	h.mu.Unlock()
	if err := mgr.Allocate(context.Background(), pod, &pod.Spec.Containers[0], lifecycle.AddOperation); err != nil {
		h.mu.Lock()
		delete(h.pods, uid)
		h.mu.Unlock()
		return nil, err
	}
	ids := []string{}
	for id := range mgr.GetDevices(string(uid), containerName)[c.Resource] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) == 0 && n > 0 {
		h.mu.Lock()
		delete(h.pods, uid)
		h.mu.Unlock()
		return nil, fmt.Errorf("the device manager allocated no %s devices (resource not registered by any plugin)", c.Resource)
	}
	out := map[string]any{"pod_uid": string(uid), "device_ids": ids}
	// The kubelet checkpoints the plugin's ContainerAllocateResponse; read it
	// back from the checkpoint file, exactly as a restarted kubelet would.
	cr, err := readCheckpointedResponse(h.dir, string(uid), c.Resource)
	if err != nil {
		out["checkpoint_error"] = err.Error()
	} else {
		for k, v := range protoMap(cr) {
			out[k] = v
		}
	}
	if opts, err := mgr.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0]); err == nil && opts != nil {
		b, _ := json.Marshal(opts)
		var m any
		_ = json.Unmarshal(b, &m)
		out["run_container_options"] = m
	}
	return out, nil
}

func readCheckpointedResponse(dir, podUID, res string) (*pluginapi.ContainerAllocateResponse, error) {
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		return nil, err
	}
	cp := checkpoint.New(nil, nil)
	if err := cm.GetCheckpoint(checkpointName, cp); err != nil {
		return nil, err
	}
	entries, _ := cp.GetData()
	for _, e := range entries {
		if e.PodUID == podUID && e.ContainerName == containerName && e.ResourceName == res {
			r := &pluginapi.ContainerAllocateResponse{}
			if err := proto.Unmarshal(e.AllocResp, r); err != nil {
				return nil, err
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("no checkpoint entry for pod %s resource %s", podUID, res)
}

func (h *harness) preferred(c command) (map[string]any, error) {
	rc, st, err := h.client(c.Resource)
	if err != nil {
		return nil, err
	}
	avail := c.Available
	if avail == nil {
		avail = st.healthy
	}
	size := c.Size
	if size == 0 && c.Count != nil {
		size = *c.Count
	}
	resp, err := rc.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   avail,
			MustIncludeDeviceIDs: c.MustInclude,
			AllocationSize:       int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	out := protoMap(resp)
	if len(resp.ContainerResponses) > 0 {
		out["device_ids"] = resp.ContainerResponses[0].DeviceIDs
	}
	return out, nil
}

func (h *harness) capacity() map[string]any {
	capacity, allocatable := h.checkCapacity()
	h.mu.Lock()
	devs := map[string]any{}
	for r, st := range h.resources {
		devs[r] = map[string]any{"healthy": st.healthy, "unhealthy": st.unhealthy}
	}
	h.mu.Unlock()
	if capacity == nil {
		capacity, allocatable = map[string]int64{}, map[string]int64{}
	}
	return map[string]any{"capacity": capacity, "allocatable": allocatable, "devices": devs}
}

func (h *harness) release(c command) map[string]any {
	h.mu.Lock()
	var released []string
	for uid := range h.pods {
		if c.PodUID == "" || string(uid) == c.PodUID {
			delete(h.pods, uid)
			released = append(released, string(uid))
		}
	}
	h.mu.Unlock()
	if mgr := h.manager(); mgr != nil {
		mgr.UpdateAllocatedDevices(h.logger)
	}
	return map[string]any{"released": released}
}

// restart simulates a kubelet restart: the old manager stops (its registration
// server closes and every plugin connection drops), then a new manager is
// built and started, which, like a starting kubelet, deletes every socket in
// the plugin dir, recreates kubelet.sock and reloads the checkpoint.
func (h *harness) restart(c command) error {
	h.lifecycle.Lock()
	defer h.lifecycle.Unlock()
	h.stop()
	if c.Delay > 0 {
		time.Sleep(time.Duration(c.Delay * float64(time.Second)))
	}
	h.restarts++
	return h.start()
}

func (h *harness) handle(c command, done chan<- struct{}) {
	var (
		res map[string]any
		err error
	)
	switch c.Cmd {
	case "allocate":
		res, err = h.allocate(c)
	case "preferred":
		res, err = h.preferred(c)
	case "capacity":
		res = h.capacity()
	case "release":
		res = h.release(c)
	case "restart":
		err = h.restart(c)
	case "stop":
		h.lifecycle.Lock()
		h.stop()
		h.lifecycle.Unlock()
		defer h.doneOnce.Do(func() { close(done) })
	default:
		err = fmt.Errorf("unknown command %q", c.Cmd)
	}
	out := map[string]any{"id": c.ID, "cmd": c.Cmd, "ok": err == nil}
	for k, v := range res {
		out[k] = v
	}
	if err != nil {
		out["error"] = err.Error()
	}
	emit("response", out)
}

func main() {
	dir := flag.String("plugin-dir", "", "device plugin directory (kubelet.sock is created here)")
	sock := flag.String("socket-name", pluginapi.KubeletSocket[len(pluginapi.DevicePluginPath):], "registration socket name")
	verbosity := flag.Int("v", 0, "log verbosity on stderr")
	poll := flag.Duration("capacity-poll", time.Second, "how often to re-read capacity (the kubelet does it on node status updates)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: kubelet-devices -plugin-dir DIR")
		os.Exit(2)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logger := logr.New(&eventSink{verbosity: *verbosity})
	klog.SetLogger(logger)

	h := &harness{dir: abs, socketName: *sock, logger: logger, pods: map[types.UID]*v1.Pod{}}
	h.lifecycle.Lock()
	err = h.start()
	h.lifecycle.Unlock()
	if err != nil {
		emit("error", map[string]any{"msg": "start failed", "error": err.Error()})
		os.Exit(1)
	}

	done := make(chan struct{})
	go func() {
		t := time.NewTicker(*poll)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				h.checkCapacity()
			case <-done:
				return
			}
		}
	}()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			var c command
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				emit("error", map[string]any{"msg": "bad command", "error": err.Error(), "line": line})
				continue
			}
			go h.handle(c, done)
		}
		close(eof)
	}()

	select {
	case <-done:
	case <-eof: // parent went away: stop like a kubelet shutting down
		h.lifecycle.Lock()
		h.stop()
		h.lifecycle.Unlock()
	case <-sigs:
		h.lifecycle.Lock()
		h.stop()
		h.lifecycle.Unlock()
	}
	emit("stopped", nil)
}
