package tests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gopslite/pslite/postoffice"
)

// The parts of Kubernetes objects the manifest test reads.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		// Service
		ClusterIP string            `yaml:"clusterIP"`
		Selector  map[string]string `yaml:"selector"`
		Ports     []struct {
			Port       int `yaml:"port"`
			TargetPort int `yaml:"targetPort"`
		} `yaml:"ports"`
		// Job
		Parallelism *int `yaml:"parallelism"`
		Completions *int `yaml:"completions"`
		Template    struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Ports []struct {
		ContainerPort int `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Optional bool   `yaml:"optional"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	LivenessProbe *struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port int    `yaml:"port"`
		} `yaml:"httpGet"`
	} `yaml:"livenessProbe"`
}

// TestKubernetesManifests decodes deploy/kubernetes/job.yaml and checks that
// it describes one consistent job: a headless Service selecting the
// scheduler's pod on the scheduler port; a scheduler, server and worker Job
// whose DMLC_ROLE matches; job sizes that match the Jobs' parallelism and
// completions; every node pointed at the Service; servers and workers
// announcing their pod IP; liveness on the metrics port; CURVE keys from an
// optional Secret; and each node's variables accepted by the configuration
// reader.
func TestKubernetesManifests(t *testing.T) {
	raw, err := os.ReadFile("../deploy/kubernetes/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var svc *k8sObject
	jobs := map[string]*k8sObject{}
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "Service":
			svc = &o
		case "Job":
			jobs[o.Spec.Template.Metadata.Labels["pslite/role"]] = &o
		default:
			t.Errorf("unexpected %s %s", o.Kind, o.Metadata.Name)
		}
	}
	if svc == nil || svc.Spec.ClusterIP != "None" || svc.Spec.Selector["pslite/role"] != "scheduler" || len(svc.Spec.Ports) != 1 {
		t.Fatalf("want a headless Service selecting the scheduler on one port, got %+v", svc)
	}
	for _, role := range []string{"scheduler", "server", "worker"} {
		if jobs[role] == nil {
			t.Fatalf("no Job for the %s", role)
		}
	}
	for k, v := range svc.Spec.Selector {
		if jobs["scheduler"].Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the scheduler's pod lacks", k, v)
		}
	}
	sizes := map[string]string{}
	for role, j := range jobs {
		if len(j.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", role, len(j.Spec.Template.Spec.Containers))
		}
		c := j.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		from := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			switch {
			case e.ValueFrom == nil:
			case e.ValueFrom.FieldRef != nil:
				from[e.Name] = e.ValueFrom.FieldRef.FieldPath
			case e.ValueFrom.SecretKeyRef != nil:
				from[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name
				if !e.ValueFrom.SecretKeyRef.Optional {
					t.Errorf("%s: %s from a Secret that is not optional", role, e.Name)
				}
			}
		}
		if env["DMLC_ROLE"] != role {
			t.Errorf("%s Job: DMLC_ROLE=%q", role, env["DMLC_ROLE"])
		}
		if env["DMLC_PS_ROOT_URI"] != svc.Metadata.Name {
			t.Errorf("%s: DMLC_PS_ROOT_URI=%q, want the Service %q", role, env["DMLC_PS_ROOT_URI"], svc.Metadata.Name)
		}
		if env["DMLC_PS_ROOT_PORT"] != strconv.Itoa(svc.Spec.Ports[0].Port) || svc.Spec.Ports[0].TargetPort != svc.Spec.Ports[0].Port {
			t.Errorf("%s: DMLC_PS_ROOT_PORT=%q, the Service serves %+v", role, env["DMLC_PS_ROOT_PORT"], svc.Spec.Ports[0])
		}
		for _, name := range []string{"DMLC_NUM_SERVER", "DMLC_NUM_WORKER"} {
			if sizes[name] == "" {
				sizes[name] = env[name]
			} else if sizes[name] != env[name] {
				t.Errorf("%s: %s=%q, another node has %q", role, name, env[name], sizes[name])
			}
		}
		if from["PS_CURVE_PUBLIC_KEY"] == "" || from["PS_CURVE_PUBLIC_KEY"] != from["PS_CURVE_SECRET_KEY"] {
			t.Errorf("%s: CURVE keys not from one Secret: %v", role, from)
		}
		_, metricsPort, _ := strings.Cut(env["PS_METRICS_ADDR"], ":")
		if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/metrics" || strconv.Itoa(p.HTTPGet.Port) != metricsPort {
			t.Errorf("%s: liveness probe %+v does not hit /metrics on PS_METRICS_ADDR %q", role, p, env["PS_METRICS_ADDR"])
		}
		lookup := func(name string) (string, bool) {
			if _, ok := from[name]; ok {
				return "", false // from the pod or an absent Secret
			}
			v, ok := env[name]
			return v, ok
		}
		switch role {
		case "scheduler":
			if env["DMLC_USE_KUBERNETES"] != "1" {
				t.Error("the scheduler must bind every interface (DMLC_USE_KUBERNETES=1)")
			}
			ports := map[int]bool{}
			for _, p := range c.Ports {
				ports[p.ContainerPort] = true
			}
			if !ports[svc.Spec.Ports[0].Port] {
				t.Errorf("the scheduler's container does not expose port %d", svc.Spec.Ports[0].Port)
			}
		default:
			if from["DMLC_NODE_HOST"] != "status.podIP" {
				t.Errorf("%s: DMLC_NODE_HOST not the pod IP", role)
			}
			lookup = func(name string) (string, bool) {
				if name == "DMLC_NODE_HOST" {
					return "10.1.2.3", true
				}
				if _, ok := from[name]; ok {
					return "", false
				}
				v, ok := env[name]
				return v, ok
			}
		}
		if _, err := postoffice.ConfigFromLookup(lookup); err != nil {
			t.Errorf("%s: %v", role, err)
		}
	}
	for role, name := range map[string]string{"server": "DMLC_NUM_SERVER", "worker": "DMLC_NUM_WORKER", "scheduler": ""} {
		j := jobs[role]
		want := 1
		if name != "" {
			want, _ = strconv.Atoi(sizes[name])
		}
		if j.Spec.Parallelism == nil || *j.Spec.Parallelism != want || j.Spec.Completions == nil || *j.Spec.Completions != want {
			t.Errorf("%s Job: parallelism %v, completions %v, want %d", role, j.Spec.Parallelism, j.Spec.Completions, want)
		}
	}
}
