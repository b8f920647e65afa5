// Command lr trains logistic regression on a ps-lite job: binary logistic
// regression for two classes, multinomial softmax regression (-loss=softmax)
// for more.
//
// Each worker reads only its shard of the data (LIBSVM text, gzipped or
// not, or IDX images such as Fashion-MNIST): a plain file is split into
// byte ranges aligned to lines. Feature ids are integers up to 2^44, or any
// string hashed to -hash-bits bits; nothing is allocated per possible id.
// The workers agree on the classes and key layout through a census of their
// shards, cut their training rows into batches whose keys are deduplicated
// once, and run mini-batch SGD with -pipeline steps in flight: per step a
// worker pulls the weights of its batch's features, computes the gradient
// of the log-loss and pushes it. The servers keep the keys pushed in a hash
// table and update them with SGD or FTRL-proximal (-opt). The consistency
// model (-sync) is ASP (no waiting), BSP (a step's gradients from every
// worker are summed and applied at once; pulls for the next step wait for
// that) or SSP (no worker more than -staleness steps ahead of the slowest);
// the servers enforce it by holding pull responses. A server's state is a
// kv.Store: with PS_REPLICAS it is kept on several servers and survives
// the loss of one, with PS_CHECKPOINT_DIR it is written to disk after
// every epoch and a job launched again resumes from it.
//
// Launch it like any ps-lite program:
//
//	go build -o build/ ./examples/lr
//	build/lr -mode=synth -out=build/train.svm -test-out=build/test.svm
//	scripts/local.sh 2 2 build/lr -train=build/train.svm -test=build/test.svm \
//	    -opt=ftrl -alpha=0.1 -beta=0.001 -batch=1000 -epochs=1
//	scripts/local.sh 2 2 build/lr -train=/usr/share/doc/liblinear-tools/examples/heart_scale -cv=5 -batch=8 -sync=bsp
//	scripts/local.sh 2 2 build/lr \
//	    -train=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
//	    -test=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz \
//	    -loss=softmax -lr=1 -lr-decay=2 -epochs=10 -model=fashion.model -plot=fashion.png
//
// After every epoch each worker scores its part of the test set (and of a
// -valid split) and the workers gather the sums; worker rank 0 prints a
// line per epoch (training loss and accuracy, test log-loss, accuracy and,
// for binary models, AUC, time and examples per second) and a final line,
// and writes the model (-model, with FTRL's state for -init-model), the
// predictions for the test set (-pred-out) and a PNG plot (-plot).
// -early-stop ends training when the validation loss stops improving and
// keeps the best epoch's model. Without a cluster, -mode=predict scores a
// model file on a data set, -mode=convert writes IDX images as LIBSVM text
// and -mode=synth writes a seeded synthetic sparse data set.
//
// Keys: feature f (0 the bias) has key f for binary logistic regression and
// f·K+c for class c of K in softmax regression. README.md describes the
// protocol, the model file format, what each consistency model costs and
// the measured results next to liblinear.
package main
