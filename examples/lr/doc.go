// Command lr trains logistic regression on a ps-lite job: binary logistic
// regression for two classes, multinomial softmax regression for more.
//
// The workers read the data (LIBSVM text, or IDX images such as
// Fashion-MNIST, gzipped or not), each keep their shard, and run mini-batch
// SGD: per step a worker pulls the weights of the features in its batch,
// computes the gradient of the log-loss and pushes it. The servers hold the
// weights, created on first touch, and update them with SGD or FTRL-proximal
// (-opt). The consistency model (-sync) is ASP (no waiting), BSP (a step's
// gradients from every worker are summed and applied at once; pulls for the
// next step wait for that) or SSP (no worker more than -staleness steps
// ahead of the slowest); the servers enforce it by holding pull responses.
//
// Launch it like any ps-lite program:
//
//	go build -o build/ ./examples/lr
//	scripts/local.sh 2 2 build/lr -train=/usr/share/doc/liblinear-tools/examples/heart_scale -cv=5 -batch=8 -sync=bsp
//	scripts/local.sh 2 2 build/lr \
//	    -train=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
//	    -test=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz \
//	    -lr=1 -lr-decay=2 -epochs=10 -model=fashion.model -plot=fashion.png
//
// Worker rank 0 prints a line per epoch (mean training loss and accuracy
// over the epoch's batches, test accuracy of the model pulled after the
// epoch, time and examples per second over all workers) and a final line,
// and writes the model (-model) and a PNG plot of loss and accuracy per
// epoch (-plot). Without a cluster, -mode=predict scores a model file on a
// data set and -mode=convert writes IDX images as LIBSVM text.
//
// Keys: feature f (1-based in the data, 0 the bias) has key f for binary
// logistic regression and f·K+c for class c of K in softmax regression.
// README.md describes the protocol, the model file format, what each
// consistency model costs and the measured results.
package main
