# shellcheck shell=bash
# Downloads, each verified before use: by its sha256, its npm integrity, its publisher's signature by a pinned
# key, or (a git source) its pinned commit. A baked image downloads nothing. Sourced by lib.sh, never run.

# True when file $1 has sha256 $2.
sha256_matches() {
  local got _
  read -r got _ < <(sha256sum "$1")
  [[ "$got" == "$2" ]]
}

# True when file $1 has npm integrity $2 (sha512-BASE64: the base64 of the file's raw sha512, as the npm registry
# publishes it in dist.integrity): the base64 is decoded to hex and held against sha512sum's.
integrity_matches() {
  local want got _
  [[ "$2" == sha512-* ]] || return 1
  want="$(printf '%s' "${2#sha512-}" | base64 -d 2>/dev/null | od -An -v -tx1 | tr -d ' \n')"
  ((${#want} == 128)) || return 1
  read -r got _ < <(sha512sum "$1")
  [[ "$got" == "$want" ]]
}

# True when file $1 matches the digest of its kind: npm integrity $2 when set, else sha256 $3.
digest_matches() {
  if [[ -n "$2" ]]; then
    integrity_matches "$1" "$2"
  else
    sha256_matches "$1" "$3"
  fi
}

# Download URL $1 to file $2.
download() {
  refuse_when_baked "download of $1"
  curl -fsSL --connect-timeout 10 --max-time 1800 -o "$2" "$1"
}

# Check that file $1 carries its publisher's detached signature $2 by the key at URL $3 whose primary fingerprint is
# $4 (kiln's pin): the key is accepted only with that fingerprint, and the signature only when gpg reports it valid
# for that primary key.
signature_matches() {
  local file="$1" signature="$2" key_url="$3" fingerprint="$4" home status
  command -v gpg >/dev/null || die "gpg is needed to check ${file##*/}'s signature and is not installed"
  home="$(mktemp -d)"
  if ! retry "$KILN_RETRY_ATTEMPTS" download "$key_url" "${home}/key" ||
    ! gpg --batch --quiet --homedir "$home" --import "${home}/key" >>"$KILN_LOG" 2>&1; then
    rm -rf "$home"
    log "the signing key at ${key_url} could not be fetched or read"
    return 1
  fi
  if ! primary_fingerprints "$home" | grep -qxF "$fingerprint"; then
    rm -rf "$home"
    log "the key at ${key_url} is not the one kiln pins (${fingerprint})"
    return 1
  fi
  # VALIDSIG's last field is the signing key's primary fingerprint (gpg's DETAILS).
  status="$(gpg --batch --homedir "$home" --status-fd 1 --verify "$signature" "$file" 2>>"$KILN_LOG" |
    awk '$1 == "[GNUPG:]" && $2 == "VALIDSIG" { print $NF }')"
  rm -rf "$home"
  [[ "$status" == "$fingerprint" ]]
}

# Print the fingerprint of every primary key in GnuPG home $1, one a line.
primary_fingerprints() {
  gpg --batch --homedir "$1" --with-colons --list-keys 2>/dev/null |
    awk -F: '$1 == "pub" { primary = 1; next } $1 == "fpr" && primary { print $10; primary = 0 }'
}

# Check out git artifact $1 at the commit bundle.env pins for it, with the submodules its build needs, into a fresh
# build directory, and set KILN_FETCHED to it. Any other commit is refused: its id names every file of the tree and
# the commit of every submodule, so nothing else needs a digest.
fetch_source() {
  local name="$1" url commit version submodules dest head submodule
  url="$(bundle_value ARTIFACT "$name" URL)"
  commit="$(bundle_value ARTIFACT "$name" COMMIT)"
  version="$(bundle_value ARTIFACT "$name" VERSION)"
  submodules="$(bundle_value ARTIFACT "$name" SUBMODULES)"
  [[ -n "$url" ]] || die "source ${name} is not part of this bundle (no URL for it in bundle.env)"
  [[ -n "$commit" ]] || die "source ${name} ${version} (${url}) has no pinned commit; refusing to build it unverified"
  refuse_when_baked "source ${name} ${version}"
  ensure_packages git
  dest="$(root_path "${KILN_BUILD_DIR}")/${name}-${version}"
  rm -rf "$dest"
  mkdir -p "$dest"
  log "fetching ${name} ${version} at commit ${commit} from ${url}"
  git -C "$dest" init -q
  retry "$KILN_RETRY_ATTEMPTS" git -C "$dest" fetch -q --depth 1 "$url" "$commit" || die "fetch of ${name} ${commit} failed: ${url}"
  git -C "$dest" checkout -q --detach FETCH_HEAD
  head="$(git -C "$dest" rev-parse HEAD)"
  if [[ "$head" != "$commit" ]]; then
    rm -rf "$dest"
    die "source ${name} ${version}: got commit ${head}, expected ${commit}; refusing to build ${url}"
  fi
  for submodule in $submodules; do
    # At the commit the verified tree records for it.
    retry "$KILN_RETRY_ATTEMPTS" git -C "$dest" submodule update -q --init --depth 1 -- "$submodule" ||
      die "fetch of ${name}'s submodule ${submodule} failed"
  done
  # shellcheck disable=SC2034 # read by the steps
  KILN_FETCHED="$dest"
}

# Download artifact $1 (pinned in bundle.env) into the cache, verified by its sha256 or, for an npm tarball, its
# integrity; sets KILN_FETCHED to its path.
fetch_artifact() {
  local name="$1" url sha version dest key_url fingerprint url_var integrity digest kind
  url_var="KILN_ARTIFACT_${name^^}_URL"
  url_var="${url_var//-/_}"
  url="$(bundle_value ARTIFACT "$name" URL)"
  sha="$(bundle_value ARTIFACT "$name" SHA256)"
  version="$(bundle_value ARTIFACT "$name" VERSION)"
  key_url="$(bundle_value ARTIFACT "$name" SIGNATURE_KEY_URL)"
  fingerprint="$(bundle_value ARTIFACT "$name" SIGNATURE_FINGERPRINT)"
  integrity="$(bundle_value ARTIFACT "$name" INTEGRITY)"
  [[ -n "$url" ]] || die "artifact ${name} is not part of this bundle (no ${url_var})"
  if [[ -n "$fingerprint" ]]; then
    fetch_signed_artifact "$name" "$version" "$url" "$key_url" "$fingerprint"
    return 0
  fi
  if [[ -z "$sha" && -z "$integrity" ]]; then
    die "artifact ${name} ${version} (${url}) has no sha256: lock it with \`kiln bootstrap lock --spec SPEC\` and deploy again; refusing to download it unverified"
  fi
  refuse_when_baked "artifact ${name} ${version}"
  # One directory per artifact keeps the upstream file name, which dpkg and rpm users expect.
  ensure_dir "$KILN_CACHE_DIR" 0700
  ensure_dir "${KILN_CACHE_DIR}/${name}-${version}" 0700
  dest="${KILN_CACHE_DIR}/${name}-${version}/${url##*/}"
  digest="${integrity:-$sha}" kind=sha256
  if [[ -n "$integrity" ]]; then
    kind="npm integrity"
  fi
  if [[ -f "$dest" ]] && digest_matches "$dest" "$integrity" "$sha"; then
    log "using cached ${name} ${version}"
  else
    log "downloading ${name} ${version} from ${url}"
    rm -f "${dest}.part"
    retry "$KILN_RETRY_ATTEMPTS" download "$url" "${dest}.part" || die "download of ${name} failed: ${url}"
    if ! digest_matches "${dest}.part" "$integrity" "$sha"; then
      rm -f "${dest}.part"
      die "artifact ${name} ${version}: ${kind} mismatch (expected ${digest}); refusing to use ${url}"
    fi
    mv -f "${dest}.part" "$dest"
  fi
  # shellcheck disable=SC2034 # read by the steps
  KILN_FETCHED="$dest"
}

# Download signed artifact $1 at version $2 from URL $3 with its signature ($3.sig), checked by the key at $4 with
# primary fingerprint $5; sets KILN_FETCHED to its path. A cached copy is checked again.
fetch_signed_artifact() {
  local name="$1" version="$2" url="$3" key_url="$4" fingerprint="$5" dest
  refuse_when_baked "artifact ${name} ${version}"
  ensure_dir "$KILN_CACHE_DIR" 0700
  ensure_dir "${KILN_CACHE_DIR}/${name}-${version}" 0700
  dest="${KILN_CACHE_DIR}/${name}-${version}/${url##*/}"
  if [[ ! -f "$dest" || ! -f "${dest}.sig" ]]; then
    log "downloading ${name} ${version} from ${url} and its signature"
    rm -f "${dest}.part" "${dest}.sig"
    retry "$KILN_RETRY_ATTEMPTS" download "$url" "${dest}.part" || die "download of ${name} failed: ${url}"
    retry "$KILN_RETRY_ATTEMPTS" download "${url}.sig" "${dest}.sig" || die "download of ${name}'s signature failed: ${url}.sig"
    mv -f "${dest}.part" "$dest"
  fi
  if ! signature_matches "$dest" "${dest}.sig" "$key_url" "$fingerprint"; then
    rm -f "$dest" "${dest}.sig"
    die "artifact ${name} ${version}: no valid signature by the key kiln pins (${fingerprint}); refusing to use ${url}"
  fi
  log "${name} ${version}: signature by ${fingerprint} verified"
  # shellcheck disable=SC2034 # read by the steps
  KILN_FETCHED="$dest"
}
