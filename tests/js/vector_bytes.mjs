// Vectors as bytes, in any host (no Node built-ins: the test page and the test Worker import it
// too): one little-endian float32 byte string, and its base64 for a JSON answer.

/** Vectors as one little-endian float32 byte string (what the cross-runtime check compares). */
export function packVectors(vectors) {
  const dim = vectors[0].length;
  const out = new Float32Array(vectors.length * dim);
  vectors.forEach((v, i) => out.set(v, i * dim));
  return new Uint8Array(out.buffer);
}

export function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
