#!/usr/bin/env bash
# make image: an OCI image of dtrain, built without Docker. A minimal Debian 12 root
# (debootstrap --variant=minbase) with the runtime packages deps/packages.txt lists for "image",
# dtrain installed under /usr/local (make install), a non-root user dtrain (uid 1000) and dtrain
# as the entrypoint; packed with Debian's umoci into an OCI layout and written as an OCI archive
# (a tar of the layout: podman load, skopeo copy oci-archive:..., or ctr import take it). The
# Dockerfile beside it builds the same image where Docker is at hand.
# usage: scripts/make_image.sh BUILD_DIR [--mirror URL]     (root; needs the Debian archive)
set -euo pipefail
build=${1:?usage: scripts/make_image.sh BUILD_DIR [--mirror URL]}
mirror=${3:-}
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "make_image.sh: needs root (debootstrap, chroot)" >&2; exit 1; }
[ -n "$mirror" ] || mirror=$(bash "$(dirname "$0")/debian_mirror.sh")
bash scripts/deps.sh build imagebuild > /dev/null
command -v debootstrap > /dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
out=$build/image
rm -rf --one-file-system "$out"
mkdir -p "$out"
packages=$(awk '!/^#/ && NF > 1 { for (i = 2; i <= NF; i++) if ($i == "image") print $1 }' \
               deps/packages.txt | paste -sd, -)
echo "make image: a minimal Debian 12 root with $packages"
debootstrap --variant=minbase --include="$packages" bookworm "$out/rootfs" "$mirror" \
    > "$out/debootstrap.log" 2>&1 || { tail -20 "$out/debootstrap.log" >&2; exit 1; }
make -s install PREFIX=/usr/local DESTDIR="$(pwd)/$out/rootfs" BUILD="$build" > /dev/null
chroot "$out/rootfs" ldconfig
echo "dtrain:x:1000:1000:dtrain:/home/dtrain:/usr/sbin/nologin" >> "$out/rootfs/etc/passwd"
echo "dtrain:x:1000:" >> "$out/rootfs/etc/group"
echo "dtrain:!:19000:0:99999:7:::" >> "$out/rootfs/etc/shadow"
install -d -o 1000 -g 1000 -m 755 "$out/rootfs/home/dtrain"
# What only the build of the root needed.
rm -rf "$out/rootfs/var/cache/apt/archives/"*.deb "$out/rootfs/var/lib/apt/lists/"* \
    "$out/rootfs/var/log/"*.log "$out/rootfs/usr/local/include" "$out/rootfs/usr/local/lib/"*.a
# The OCI layout: an empty image, its bundle filled with the root, repacked as one layer.
umoci init --layout "$out/oci"
umoci new --image "$out/oci:latest"
umoci unpack --image "$out/oci:latest" "$out/bundle" > /dev/null
rm -rf "$out/bundle/rootfs"
mv "$out/rootfs" "$out/bundle/rootfs"
umoci repack --image "$out/oci:latest" "$out/bundle"
umoci config --image "$out/oci:latest" --config.entrypoint /usr/local/bin/dtrain \
    --config.cmd --help --config.user 1000:1000 --config.workingdir /home/dtrain \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.label "org.opencontainers.image.title=dtrain" \
    --config.label "org.opencontainers.image.version=$("$build/dtrain" --version | awk '{print $2}')"
umoci gc --layout "$out/oci"
rm -rf --one-file-system "$out/bundle"
tar -C "$out/oci" -cf "$build/dtrain-image.oci.tar" .
bytes=$(stat -c %s "$build/dtrain-image.oci.tar")
echo "make image: $build/dtrain-image.oci.tar, $((bytes / 1048576)) MiB (OCI archive, tag latest)"
