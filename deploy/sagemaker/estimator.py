"""DeepFM on two SageMaker instances with SageMaker's parameter-server distribution.

SageMaker runs the image with "train" as its argument: dtrain's sagemaker resolver reads the
hosts from /opt/ml/input/config/resourceconfig.json (the master on the first, a worker on the
second, a ps on each), the hyperparameters below become dtrain train's flags, the channels are
mounted under /opt/ml/input/data/<channel>/, and a failure's reason lands in
/opt/ml/output/failure. The image's entry, deploy/sagemaker/entry.sh, runs each host's ps task
(dtrain server) beside dtrain train. Checkpoints go to
/opt/ml/checkpoints, which SageMaker syncs to checkpoint_s3_uri; the ps tasks write their shards
there too, so a job restarted from the same checkpoint_s3_uri resumes.

Needs the SageMaker Python SDK and an AWS account; not run by dtrain's tests, which check the
hyperparameters and the cluster they make (tests/deploy.sh).
"""

from sagemaker.estimator import Estimator

HYPERPARAMETERS = {
    "model": "deepfm",
    "data": "libsvm:/opt/ml/input/data/train/train.svm",
    "test_data": "libsvm:/opt/ml/input/data/test/test.svm",
    "feature_size": 1000000,
    "strategy": "parameter_server",
    "epochs": 2,
    "batch_size": 1024,
    "threads": 4,
    "secret_file": "/opt/ml/input/data/secret/cluster-secret",
}

INSTANCE_COUNT = 2


def main():
    estimator = Estimator(
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/dtrain:latest",
        role="arn:aws:iam::123456789012:role/SageMakerTraining",
        instance_count=INSTANCE_COUNT,
        instance_type="ml.c5.4xlarge",
        hyperparameters=HYPERPARAMETERS,
        distribution={"parameter_server": {"enabled": True}},
        checkpoint_s3_uri="s3://my-bucket/ctr-deepfm/checkpoints",
        max_retry_attempts=3,
    )
    estimator.fit({"train": "s3://my-bucket/ctr/train/", "test": "s3://my-bucket/ctr/test/",
                   "secret": "s3://my-bucket/ctr/secret/"})


if __name__ == "__main__":
    main()
