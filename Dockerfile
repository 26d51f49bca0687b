# sluice in a container: built with the project's own install script
# (scripts/install, which t/ops_install.t runs without Docker), run as
# nginx's images run: the master as root in the foreground (`daemon off;`),
# the workers as the unprivileged user `sluice` (contrib/sluice.conf's
# `user`), the logs on the container's stdout and stderr.
#
#   docker build -t sluice .
#   docker run --rm -p 8080:80 sluice
#   docker run --rm -p 8080:80 -v $PWD/site.conf:/etc/sluice/conf.d/site.conf:ro sluice
#   docker kill -s HUP CONTAINER      reload the configuration
#   docker stop CONTAINER             graceful stop (QUIT), TERM after -t seconds
#
# Kubernetes: deploy/kubernetes/.

FROM rust:1-bookworm AS build
WORKDIR /src
# The dependencies first, so that a change to the sources does not fetch
# them again.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' >src/main.rs && touch src/lib.rs \
    && cargo fetch --locked && rm -r src
COPY . .
# The profile-guided release build (scripts/release: an instrumented build,
# a training run on loopback, the build again with its profile).
RUN scripts/install --build --profile release --destdir /out

FROM debian:bookworm-slim
# The workers' user: no home, no shell, no password.
RUN groupadd --system sluice \
    && useradd --system --gid sluice --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin sluice
COPY --from=build /out/usr/sbin/sluice /usr/sbin/sluice
COPY --from=build /out/etc/sluice/ /etc/sluice/
COPY --from=build /out/usr/share/sluice/ /usr/share/sluice/
COPY --from=build /out/usr/share/man/ /usr/share/man/
# Logs to the container's output (as nginx's official image does), read
# with `docker logs`; a mounted file or a log shipper can replace them.
RUN install -d -m 755 /var/log/sluice \
    && ln -s /dev/stdout /var/log/sluice/access.log \
    && ln -s /dev/stderr /var/log/sluice/error.log \
    && /usr/sbin/sluice -t -p /usr/share/sluice/ -c /etc/sluice/sluice.conf -e /var/log/sluice/error.log
EXPOSE 80
# QUIT is the graceful stop: requests in flight finish.
STOPSIGNAL SIGQUIT
ENTRYPOINT ["/usr/sbin/sluice", "-p", "/usr/share/sluice/", "-c", "/etc/sluice/sluice.conf", "-e", "/var/log/sluice/error.log"]
CMD ["-g", "daemon off;"]
