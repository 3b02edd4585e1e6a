// Command informer is the client-go baseline of scripts/bench_live.py and scripts/load_test.py: the watch of a
// platform team's Go controller. A metadata-only shared informer factory (metadata.NewForConfig, metadatainformer,
// no resync) runs informers for --resources (default ConfigMaps and Deployments) in every namespace, with
// client-go's defaults otherwise (its QPS and burst, its initial list, no transform).
//
// The event handlers count each add, update and delete as they receive it and record the object's
// resourceVersion and the receive time in unix seconds (not with --count-only, for long runs). The program prints
// "ready" once the caches have synced and "seen NAME" when an object whose name starts with --marker arrives; on
// SIGTERM or SIGINT it writes {"events": n, "times": [[resourceVersion, seconds], ...]} to --out and exits 0. On
// SIGUSR1 it prints "events N synced RV...": the events handled so far and each informer's last synced
// resourceVersion (what its reflector last listed or watched up to: it passes a write made while the informer was
// stopped once a relist after 410 Gone has read it; the relist itself calls no handler, as nothing changed).
//
//	go build -o informer . && ./informer --kubeconfig KUBECONFIG --out times.json --marker bench-marker-
//
// The benchmarks build it once per source (harness/go_build.py) and cache the binary.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// recorder counts every event and, unless countOnly, keeps its (resourceVersion, receive time) in the order
// received.
type recorder struct {
	marker    string
	countOnly bool
	mu        sync.Mutex
	events    int
	times     [][2]any
}

func (r *recorder) record(obj any) {
	now := float64(time.Now().UnixMicro()) / 1e6
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	object, err := meta.Accessor(obj)
	if err != nil {
		log.Printf("event of an object without metadata: %v", err)
		return
	}
	r.mu.Lock()
	r.events++
	if !r.countOnly {
		r.times = append(r.times, [2]any{object.GetResourceVersion(), now})
	}
	r.mu.Unlock()
	if strings.HasPrefix(object.GetName(), r.marker) {
		fmt.Printf("seen %s\n", object.GetName())
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events
}

func (r *recorder) write(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	doc, err := json.Marshal(map[string]any{"events": r.events, "times": r.times})
	if err != nil {
		return err
	}
	return os.WriteFile(path, doc, 0o644)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster to watch")
	out := flag.String("out", "", "file the events are written to on SIGTERM or SIGINT")
	marker := flag.String("marker", "bench-marker-", "name prefix of the objects reported with \"seen NAME\"")
	resources := flag.String("resources", "v1/configmaps,apps/v1/deployments",
		"comma-separated [GROUP/]VERSION/RESOURCE to watch")
	countOnly := flag.Bool("count-only", false, "count the events without keeping their times (long runs)")
	flag.Parse()
	if *out == "" {
		log.Fatal("--out is required")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	client, err := metadata.NewForConfig(config)
	if err != nil {
		log.Fatal(err)
	}
	factory := metadatainformer.NewSharedInformerFactory(client, 0)
	rec := &recorder{marker: *marker, countOnly: *countOnly}
	var informers []cache.SharedIndexInformer
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    rec.record,
		UpdateFunc: func(_, obj any) { rec.record(obj) },
		DeleteFunc: rec.record,
	}
	for _, name := range strings.Split(*resources, ",") {
		parts := strings.Split(name, "/")
		if len(parts) == 2 {
			parts = append([]string{""}, parts...)
		}
		if len(parts) != 3 {
			log.Fatalf("--resources: %q is not [GROUP/]VERSION/RESOURCE", name)
		}
		resource := schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}
		informer := factory.ForResource(resource).Informer()
		if _, err := informer.AddEventHandler(handler); err != nil {
			log.Fatal(err)
		}
		informers = append(informers, informer)
	}
	progress := make(chan os.Signal, 1)
	signal.Notify(progress, syscall.SIGUSR1)
	go func() {
		for range progress {
			line := "events " + strconv.Itoa(rec.count()) + " synced"
			for _, informer := range informers {
				line += " " + informer.LastSyncResourceVersion()
			}
			fmt.Println(line)
		}
	}()

	factory.Start(ctx.Done())
	for resource, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			log.Fatalf("the cache of %s did not sync", resource)
		}
	}
	fmt.Println("ready")
	<-ctx.Done()
	factory.Shutdown()
	if err := rec.write(*out); err != nil {
		log.Fatal(err)
	}
}
