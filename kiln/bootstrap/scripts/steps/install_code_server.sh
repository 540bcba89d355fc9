# shellcheck shell=bash
# code-server (VS Code in a browser) on the node it runs on (KILN_CODE_SERVER_ROLE: a login node, else the Slurm
# controller), or in a bake, which serves every role. Everything comes from the npm registry, each tarball checked by
# the registry's published integrity (sha512): Node 24 (code-server's engines) and npm unpacked as Node's own builds
# lay them out under KILN_CODE_SERVER_PREFIX/node, then npm installs code-server's tarball into that prefix. npm checks
# every dependency against the integrity code-server's npm-shrinkwrap.json pins, and code-server's postinstall builds
# VS Code's native modules with node-gyp against Node's own headers (npm_config_nodedir: nothing else is downloaded),
# with the OS's compiler, make, pkg-config, python3 and Kerberos headers (code-server's docs/npm.md, plus kerberos's
# gssapi.h). Versions, once installed, are recorded: a rerun installs nothing.

# The packages node-gyp builds code-server's native modules with, from the OS's own repositories.
code_server_build_packages() {
  if [[ "$KILN_PKG" == apt ]]; then
    ensure_packages build-essential pkg-config python3 libkrb5-dev
  else
    ensure_packages gcc-c++ make pkgconf-pkg-config python3 krb5-devel
  fi
}

# Unpack npm tarball $1 (package/...) into directory $2.
unpack_npm_tarball() {
  mkdir -p "$2"
  tar -xzf "$1" -C "$2" --strip-components=1 --no-same-owner
}

# Run npm of Node $1 with arguments $3...; $2 is a private directory for its cache and configuration. Node 24 comes
# first in PATH (code-server's postinstall runs `npm`, node-gyp runs `node`), no user or global npmrc is read, and
# node-gyp takes the headers from Node's own tree instead of downloading them.
code_server_npm() {
  local node="$1" work="$2"
  shift 2
  mkdir -p "${work}/home" "${work}/cache"
  : >"${work}/npmrc"
  : >"${work}/npmrc-global"
  env PATH="${node}/bin:${PATH}" HOME="${work}/home" \
    npm_config_nodedir="$node" npm_config_cache="${work}/cache" \
    npm_config_userconfig="${work}/npmrc" npm_config_globalconfig="${work}/npmrc-global" \
    npm_config_registry=https://registry.npmjs.org/ npm_config_fetch_retries=5 \
    npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false \
    "${node}/bin/npm" "$@"
}

install_code_server() {
  local prefix node want entry work have
  if [[ -z "${KILN_CODE_SERVER_VERSION:-}" ]]; then
    skip "code-server is off: the spec has no code_server section"
    return 0
  fi
  if [[ "${KILN_PHASE:-}" != bake && "$KILN_NODE_ROLE" != "$KILN_CODE_SERVER_ROLE" ]]; then
    skip "code-server runs on the ${KILN_CODE_SERVER_ROLE} node, this is a ${KILN_NODE_ROLE}"
    return 0
  fi
  prefix="$(root_path "$KILN_CODE_SERVER_PREFIX")"
  node="${prefix}/node"
  entry="${prefix}/lib/node_modules/code-server/out/node/entry.js"
  want="code-server ${KILN_CODE_SERVER_VERSION} node ${KILN_CODE_SERVER_NODE_VERSION} npm ${KILN_CODE_SERVER_NPM_VERSION}"
  if already_installed code-server "$want" && [[ -x "${node}/bin/node" && -f "$entry" ]]; then
    skip "${want} is installed in ${KILN_CODE_SERVER_PREFIX}"
    return 0
  fi
  refuse_when_baked "code-server ${KILN_CODE_SERVER_VERSION}"
  code_server_build_packages
  # Whatever an earlier, unfinished run left there goes: the marker is written only after a whole install.
  rm -rf "$prefix"
  fetch_artifact node
  unpack_npm_tarball "$KILN_FETCHED" "$node"
  have="$("${node}/bin/node" --version)" || die "Node ${KILN_CODE_SERVER_NODE_VERSION} from ${KILN_FETCHED} does not run on this node"
  [[ "$have" == "v${KILN_CODE_SERVER_NODE_VERSION}" ]] ||
    die "Node from ${KILN_FETCHED} reports ${have}, expected v${KILN_CODE_SERVER_NODE_VERSION}"
  # Where Node's own builds keep npm, which its bin/npm finds beside node.
  fetch_artifact npm
  unpack_npm_tarball "$KILN_FETCHED" "${node}/lib/node_modules/npm"
  ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "${node}/bin/npm"
  fetch_artifact code-server
  work="${KILN_CACHE_DIR}/npm"
  log "installing ${want} into ${KILN_CODE_SERVER_PREFIX} (npm, then node-gyp builds VS Code's native modules)"
  code_server_npm "$node" "$work" install --global --prefix "$prefix" --omit=dev "$KILN_FETCHED" ||
    die "npm could not install code-server ${KILN_CODE_SERVER_VERSION}: npm's output is in the log above"
  [[ -f "$entry" ]] || die "npm installed code-server ${KILN_CODE_SERVER_VERSION} without ${entry}"
  record_installed code-server "$want"
}
