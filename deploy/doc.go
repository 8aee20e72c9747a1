// Package deploy holds Floodgate's Kubernetes deployment: the Helm chart
// in helm/floodgate and the plain manifests in manifests/, rendered from
// the chart. It is a module of its own, so that the main module never
// downloads Helm or the Kubernetes API types; its tests render the chart
// with Helm's Go library and decode every object strictly into the
// Kubernetes API types (see docs/kubernetes.md).
package deploy
