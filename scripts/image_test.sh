#!/usr/bin/env bash
# The image make image wrote, run as a container runtime would: the OCI archive unpacked by umoci
# into a bundle, then in its root filesystem (chroot, as the image's non-root user 1000):
# dtrain --version, the user's id, and a one-process training on data generated there.
# Leaves nothing behind. Prints "N passed, N failed".
# usage: scripts/image_test.sh BUILD_DIR      (root; after make image)
set -u
build=${1:?usage: scripts/image_test.sh BUILD_DIR}
archive=$build/dtrain-image.oci.tar
work=$(mktemp -d /tmp/dtrain-image-XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT
passed=0
failed=0
ok() { echo "ok   $1${2:+ $2}"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
mkdir -p "$work/oci"
if tar -C "$work/oci" -xf "$archive" && umoci unpack --image "$work/oci:latest" "$work/bundle" > /dev/null 2>&1; then
    ok image_unpacks "$(du -sh "$work/bundle/rootfs" | cut -f1) root filesystem"
else
    fail image_unpacks "$archive did not unpack"
    echo "$passed passed, $failed failed"
    exit 1
fi
config=$(cat "$work/bundle/config.json")
user=$(echo "$config" | python3 -c 'import json,sys; p=json.load(sys.stdin)["process"]; print(p["user"]["uid"], " ".join(p["args"]))')
in_image() { chroot --userspec=1000:1000 "$work/bundle/rootfs" /usr/bin/env HOME=/home/dtrain "$@"; }
if [ "${user%% *}" = 1000 ] && [[ "$user" == *"/usr/local/bin/dtrain"* ]]; then
    ok image_runs_dtrain_as_a_user "uid ${user%% *}, entrypoint ${user#* }"
else fail image_runs_dtrain_as_a_user "config: $user"; fi
version=$(in_image /usr/local/bin/dtrain --version 2>&1)
id=$(in_image id -u 2>&1)
if [ "$version" = "$("$build/dtrain" --version)" ] && [ "$id" = 1000 ]; then
    ok image_dtrain_version "$version, uid $id"
else fail image_dtrain_version "'$version', uid '$id'"; fi
out=$(in_image sh -c 'cd /home/dtrain && dtrain data gen-ctr --rows 4000 --seed 1 --out t.svm > /dev/null &&
      dtrain train --model deepfm --data libsvm:t.svm --test-data none --epochs 1 --batch-size 256 \
      --feature-size 3000000 --threads 1 --progress none --model-dir m' 2>&1)
if echo "$out" | grep -q "^Trained 1[0-9] steps" && [ -e "$work/bundle/rootfs/home/dtrain/m/checkpoint" ] &&
    [ "$(stat -c %u "$work/bundle/rootfs/home/dtrain/m/checkpoint")" = 1000 ]; then
    ok image_trains_in_one_process "$(echo "$out" | grep "^Trained")"
else fail image_trains_in_one_process "$(echo "$out" | tail -3)"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
