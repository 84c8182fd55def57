// Package containers tests Enforcement as shipped: the images, on a private network.
package containers
