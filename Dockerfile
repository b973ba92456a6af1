# The image make image builds without Docker (scripts/make_image.sh), for those who have Docker:
# dtrain built from this tree, then installed on Debian 12 with the same runtime packages
# (deps/packages.txt's "image" group), a non-root user dtrain (uid 1000), dtrain as the
# entrypoint.
#   docker build -t dtrain .
#   docker run --rm dtrain --version
FROM debian:bookworm-slim AS build
COPY . /src
WORKDIR /src
RUN apt-get update -q && apt-get install -y -q --no-install-recommends make && \
    bash scripts/deps.sh build && make -j"$(nproc)" && make install PREFIX=/usr/local DESTDIR=/out && \
    rm -rf /out/usr/local/include /out/usr/local/lib/*.a

FROM debian:bookworm-slim
COPY deps/packages.txt /tmp/packages.txt
RUN apt-get update -q && \
    apt-get install -y -q --no-install-recommends \
        $(awk '!/^#/ && NF > 1 { for (i = 2; i <= NF; i++) if ($i == "image") print $1 }' /tmp/packages.txt) && \
    rm -rf /var/lib/apt/lists/* /tmp/packages.txt && \
    useradd --uid 1000 --create-home --shell /usr/sbin/nologin dtrain
COPY --from=build /out/usr/local /usr/local
RUN ldconfig
USER 1000:1000
WORKDIR /home/dtrain
ENTRYPOINT ["/usr/local/bin/dtrain"]
CMD ["--help"]
