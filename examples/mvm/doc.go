// Command mvm trains a multi-view machine (Cao et al., 2016) for binary
// classification on a ps-lite job: the fields of libffm input
// (label field:feature:value ...) are its views, and it scores a row with
// the product over the views of (1 + u_p + Σ v_i x_i over the view's
// entries), per factor, beside a linear part. It shares lr's and fm's code
// (examples/internal/ctr) and command line; the weights live on KV app 0
// and the factors (-factors=K keys per feature, then the views' constants)
// on app 1.
//
//	go build -o build/ ./examples/mvm
//	build/mvm -mode=synth -fields=20 -out=build/ctr.train -test-out=build/ctr.test
//	scripts/local.sh 2 2 build/mvm -train=build/ctr.train -test=build/ctr.test -opt=ftrl -epochs=3
//
// The last line reports "test auc".
package main
