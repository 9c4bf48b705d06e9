package main

import (
	_ "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

func main() {}
