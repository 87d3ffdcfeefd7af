#!/usr/bin/env bash
# The baseline dopesync is measured against: the same job done the obvious way with tar, jq and
# curl, one bundle after another, one process per request, no checkpoints, no retries.
# Usage: naive-sync.sh API_URL TOKEN BUNDLE...
set -euo pipefail
api=$1; token=$2; shift 2
post() {  # post PATH JSON → prints the new id
  curl -sf -X POST "$api$1" -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
    -H "Idempotency-Key: naive-$(echo -n "$1$2" | sha256sum | cut -c1-40)" -d "$2" | jq -r .id
}
for bundle in "$@"; do
  dir=$(mktemp -d); tar -xzf "$bundle" -C "$dir"; s="$dir/session.json"
  sid=$(post /api/sessions "$(jq -c '{clientId: .id, sessionDate, rifleSetupId, locationId, notes, temperature, humidity, pressure, windSpeed, windDirection, altitude} | with_entries(select(.value != null))' "$s")")
  for i in $(seq 0 $(($(jq '.dopeEntries | length' "$s") - 1))); do
    post "/api/sessions/$sid/dope" "$(jq -c ".dopeEntries[$i] | {clientId: .id, distance, elevationMoa, elevationMil, windageMoa, windageMil, ammunitionId, notes} | with_entries(select(.value != null))" "$s")" > /dev/null
  done
  for i in $(seq 0 $(($(jq '.chronoSessions | length' "$s") - 1))); do
    cid=$(post "/api/sessions/$sid/chrono" "$(jq -c ".chronoSessions[$i] | {clientId: .id, ammunitionId, ammoLotId, chronographModel, distanceToChronograph, notes} | with_entries(select(.value != null))" "$s")")
    for j in $(seq 0 $(($(jq ".chronoSessions[$i].velocityReadings | length" "$s") - 1))); do
      post "/api/sessions/$sid/chrono/$cid/readings" "$(jq -c ".chronoSessions[$i].velocityReadings[$j] | {clientId: .id, shotNumber, velocity, isExcluded}" "$s")" > /dev/null
    done
  done
  for i in $(seq 0 $(($(jq '.groupEntries | length' "$s") - 1))); do
    gid=$(post "/api/sessions/$sid/groups" "$(jq -c ".groupEntries[$i] | {clientId: .id, groupNumber, distance, numberOfShots, groupSizeMoa, meanRadiusMoa, ammunitionId, notes} | with_entries(select(.value != null))" "$s")")
    if [ "$(jq ".groupEntries[$i].measurement != null" "$s")" = true ]; then
      post "/api/groups/$gid/measurement" "$(jq -c ".groupEntries[$i] | .id as \$g | .measurement | {clientId: \$g, holePositions, bulletDiameter, calibrationMethod, measurementConfidence, horizontalSpread, verticalSpread, cep50} | with_entries(select(.value != null))" "$s")" > /dev/null
    fi
    gclient=$(jq -r ".groupEntries[$i].id" "$s")
    for name in $(jq -r ".groupEntries[$i].imageFileNames[]" "$s"); do
      case "${name##*.}" in png) type=image/png ;; webp) type=image/webp ;; heic) type=image/heic ;; *) type=image/jpeg ;; esac
      curl -sf -X POST "$api/api/groups/$gid/images" -H "Authorization: Bearer $token" \
        -H "Idempotency-Key: naive-$gclient-$name" -F "clientId=$gclient" -F role=photo -F "fileName=$name" \
        -F "file=@$dir/images/$name;type=$type" > /dev/null
    done
  done
  rm -rf "$dir"
done
