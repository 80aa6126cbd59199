//! Known-answer tests of the primitives the seal is built on, with the
//! vectors typed from the published texts:
//!
//! - RFC 8439 §2.8.2: AEAD_CHACHA20_POLY1305 (the blob STREAM's AEAD).
//! - draft-irtf-cfrg-xchacha-03 Appendix A.1 (A.3.1 in the earlier
//!   draft-arciszewski-xchacha numbering): AEAD_XChaCha20_Poly1305.
//! - RFC 7748 §6.1: X25519 Diffie-Hellman.
//! - RFC 5869 A.1: HKDF-SHA256.
//! - RFC 9180 A.2.1 and A.2.2: HPKE DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
//!   ChaCha20Poly1305, base and PSK modes. The `hpke` crate draws the
//!   ephemeral key as DeriveKeyPair(random(32)), so an RNG that returns the
//!   vector's ikmE reproduces the RFC's encapsulation exactly.

use crate::support::seal_rng;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, XChaCha20Poly1305};
use gelstore::seal::wrap::derive_x25519_keypair;
use hkdf::Hkdf;
use hpke::aead::ChaCha20Poly1305 as HpkeChaCha;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable, Kem, OpModeR, OpModeS, PskBundle, Serializable};
use seal_rng::{FixedRng, hex, unhex};
use sha2::Sha256;
use x25519_dalek::{PublicKey, StaticSecret};

const SUNSCREEN: &[u8] = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";

#[test]
fn rfc8439_2_8_2_chacha20_poly1305() {
    let key = unhex(
        "80 81 82 83 84 85 86 87 88 89 8a 8b 8c 8d 8e 8f 90 91 92 93 94 95 96 97 98 99 9a 9b 9c 9d 9e 9f",
    );
    // 32-bit fixed-common part 07 00 00 00, then the IV 40..47.
    let nonce = unhex("07 00 00 00 40 41 42 43 44 45 46 47");
    let aad = unhex("50 51 52 53 c0 c1 c2 c3 c4 c5 c6 c7");
    let ciphertext = unhex(
        "d3 1a 8d 34 64 8e 60 db 7b 86 af bc 53 ef 7e c2
         a4 ad ed 51 29 6e 08 fe a9 e2 b5 a7 36 ee 62 d6
         3d be a4 5e 8c a9 67 12 82 fa fb 69 da 92 72 8b
         1a 71 de 0a 9e 06 0b 29 05 d6 a5 b6 7e cd 3b 36
         92 dd bd 7f 2d 77 8b 8c 98 03 ae e3 28 09 1b 58
         fa b3 24 e4 fa d6 75 94 55 85 80 8b 48 31 d7 bc
         3f f4 de f0 8e 4b 7a 9d e5 76 d2 65 86 ce c6 4b
         61 16",
    );
    let tag = unhex("1a:e1:0b:59:4f:09:e2:6a:7e:90:2e:cb:d0:60:06:91");
    assert_eq!(SUNSCREEN.len(), 114);

    let aead = ChaCha20Poly1305::new_from_slice(&key).unwrap();
    let out = aead
        .encrypt(
            nonce.as_slice().try_into().unwrap(),
            Payload {
                msg: SUNSCREEN,
                aad: &aad,
            },
        )
        .unwrap();
    assert_eq!(hex(&out[..114]), hex(&ciphertext));
    assert_eq!(hex(&out[114..]), hex(&tag));
    let back = aead
        .decrypt(
            nonce.as_slice().try_into().unwrap(),
            Payload {
                msg: &out,
                aad: &aad,
            },
        )
        .unwrap();
    assert_eq!(back, SUNSCREEN);
}

#[test]
fn xchacha_draft_aead_xchacha20_poly1305() {
    let key = unhex(
        "80 81 82 83 84 85 86 87 88 89 8a 8b 8c 8d 8e 8f 90 91 92 93 94 95 96 97 98 99 9a 9b 9c 9d 9e 9f",
    );
    let iv = unhex("40 41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f 50 51 52 53 54 55 56 57");
    let aad = unhex("50 51 52 53 c0 c1 c2 c3 c4 c5 c6 c7");
    let ciphertext = unhex(
        "bd 6d 17 9d 3e 83 d4 3b 95 76 57 94 93 c0 e9 39
         57 2a 17 00 25 2b fa cc be d2 90 2c 21 39 6c bb
         73 1c 7f 1b 0b 4a a6 44 0b f3 a8 2f 4e da 7e 39
         ae 64 c6 70 8c 54 c2 16 cb 96 b7 2e 12 13 b4 52
         2f 8c 9b a4 0d b5 d9 45 b1 1b 69 b9 82 c1 bb 9e
         3f 3f ac 2b c3 69 48 8f 76 b2 38 35 65 d3 ff f9
         21 f9 66 4c 97 63 7d a9 76 88 12 f6 15 c6 8b 13
         b5 2e",
    );
    let tag = unhex("c0:87:59:24:c1:c7:98:79:47:de:af:d8:78:0a:cf:49");

    let aead = XChaCha20Poly1305::new_from_slice(&key).unwrap();
    let out = aead
        .encrypt(
            iv.as_slice().try_into().unwrap(),
            Payload {
                msg: SUNSCREEN,
                aad: &aad,
            },
        )
        .unwrap();
    assert_eq!(hex(&out[..114]), hex(&ciphertext));
    assert_eq!(hex(&out[114..]), hex(&tag));
    let mut bad = out.clone();
    bad[0] ^= 1;
    assert!(
        aead.decrypt(
            iv.as_slice().try_into().unwrap(),
            Payload {
                msg: &bad,
                aad: &aad
            }
        )
        .is_err()
    );
}

#[test]
fn rfc7748_6_1_x25519() {
    let alice_sk: [u8; 32] =
        unhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
            .try_into()
            .unwrap();
    let alice_pk = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";
    let bob_sk: [u8; 32] =
        unhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
            .try_into()
            .unwrap();
    let bob_pk = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";
    let shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";

    let a = StaticSecret::from(alice_sk);
    let b = StaticSecret::from(bob_sk);
    let a_pub = PublicKey::from(&a);
    let b_pub = PublicKey::from(&b);
    assert_eq!(hex(a_pub.as_bytes()), alice_pk);
    assert_eq!(hex(b_pub.as_bytes()), bob_pk);
    assert_eq!(hex(a.diffie_hellman(&b_pub).as_bytes()), shared);
    assert_eq!(hex(b.diffie_hellman(&a_pub).as_bytes()), shared);
    // The device key type wraps the same arithmetic.
    let device = gelstore::seal::DeviceKey::from_secret_bytes(alice_sk);
    assert_eq!(hex(&device.public_key()), alice_pk);
}

#[test]
fn rfc5869_a1_hkdf_sha256() {
    let ikm = unhex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
    let salt = unhex("000102030405060708090a0b0c");
    let info = unhex("f0f1f2f3f4f5f6f7f8f9");
    let (prk, hk) = Hkdf::<Sha256>::extract(Some(&salt), &ikm);
    assert_eq!(
        hex(&prk),
        "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
    );
    let mut okm = [0u8; 42];
    hk.expand(&info, &mut okm).unwrap();
    assert_eq!(
        hex(&okm),
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    );
}

/// One RFC 9180 A.2.x setup with its seq-0..256 encryptions and exports.
struct HpkeVector {
    ikm_e: &'static str,
    pk_em: &'static str,
    sk_em: &'static str,
    ikm_r: &'static str,
    pk_rm: &'static str,
    sk_rm: &'static str,
    psk: Option<(&'static str, &'static str)>,
    /// (sequence number, ciphertext) for pt/aad as in the RFC.
    encryptions: &'static [(u32, &'static str)],
    /// (exporter_context, exported_value), L = 32.
    exports: &'static [(&'static str, &'static str)],
}

fn clamp(sk: &str) -> [u8; 32] {
    let mut k: [u8; 32] = unhex(sk).try_into().unwrap();
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
    k
}

const INFO: &str = "4f6465206f6e2061204772656369616e2055726e";
const PT: &str = "4265617574792069732074727574682c20747275746820626561757479";

fn run_hpke_vector(v: &HpkeVector) {
    type K = X25519HkdfSha256;
    // DeriveKeyPair gives the RFC's keys.
    // The hpke crate serializes X25519 secrets clamped (RFC 7748 §5); the
    // RFC lists them unclamped, so compare the clamped forms.
    let (sk_e, pk_e) = derive_x25519_keypair(&unhex(v.ikm_e));
    assert_eq!(hex(&sk_e), hex(&clamp(v.sk_em)));
    assert_eq!(hex(&pk_e), v.pk_em);
    let (sk_r, pk_r) = derive_x25519_keypair(&unhex(v.ikm_r));
    assert_eq!(hex(&sk_r), hex(&clamp(v.sk_rm)));
    assert_eq!(hex(&pk_r), v.pk_rm);

    let pk = <K as Kem>::PublicKey::from_bytes(&pk_r).unwrap();
    let sk = <K as Kem>::PrivateKey::from_bytes(&sk_r).unwrap();
    let psk = v.psk.map(|(p, id)| (unhex(p), unhex(id)));
    let (mode_s, mode_r) = match &psk {
        None => (OpModeS::Base, OpModeR::Base),
        Some((p, id)) => (
            OpModeS::Psk(PskBundle::new(p, id).unwrap()),
            OpModeR::Psk(PskBundle::new(p, id).unwrap()),
        ),
    };
    let info = unhex(INFO);
    let mut rng = FixedRng::new(&unhex(v.ikm_e));
    let (enc, mut sender) =
        hpke::setup_sender_with_rng::<HpkeChaCha, HkdfSha256, K>(&mode_s, &pk, &info, &mut rng)
            .unwrap();
    assert_eq!(rng.remaining(), 0);
    assert_eq!(hex(&enc.to_bytes()), v.pk_em, "enc");
    let mut receiver =
        hpke::setup_receiver::<HpkeChaCha, HkdfSha256, K>(&mode_r, &sk, &enc, &info).unwrap();

    let pt = unhex(PT);
    let mut expected = v.encryptions.iter().peekable();
    for seq in 0..=256u32 {
        let aad = format!("Count-{seq}");
        let ct = sender.seal(&pt, aad.as_bytes()).unwrap();
        let back = receiver.open(&ct, aad.as_bytes()).unwrap();
        assert_eq!(back, pt);
        if let Some((n, want)) = expected.peek()
            && *n == seq
        {
            assert_eq!(hex(&ct), want.replace(char::is_whitespace, ""), "seq {seq}");
            expected.next();
        }
    }
    assert!(expected.next().is_none());
    for (ctx, want) in v.exports {
        let mut out = [0u8; 32];
        sender.export(&unhex(ctx), &mut out).unwrap();
        assert_eq!(hex(&out), *want, "export {ctx:?}");
        let mut out_r = [0u8; 32];
        receiver.export(&unhex(ctx), &mut out_r).unwrap();
        assert_eq!(out_r, out);
    }

    // The single-shot API (what the key wraps use) gives the seq-0 ciphertext.
    let mut rng = FixedRng::new(&unhex(v.ikm_e));
    let (enc1, ct0) = hpke::single_shot_seal_with_rng::<HpkeChaCha, HkdfSha256, K>(
        &mode_s, &pk, &info, &pt, b"Count-0", &mut rng,
    )
    .unwrap();
    assert_eq!(hex(&enc1.to_bytes()), v.pk_em);
    assert_eq!(
        hex(&ct0),
        v.encryptions[0].1.replace(char::is_whitespace, "")
    );
}

#[test]
fn rfc9180_a_2_1_base_x25519_sha256_chacha20poly1305() {
    run_hpke_vector(&HpkeVector {
        ikm_e: "909a9b35d3dc4713a5e72a4da274b55d3d3821a37e5d099e74a647db583a904b",
        pk_em: "1afa08d3dec047a643885163f1180476fa7ddb54c6a8029ea33f95796bf2ac4a",
        sk_em: "f4ec9b33b792c372c1d2c2063507b684ef925b8c75a42dbcbf57d63ccd381600",
        ikm_r: "1ac01f181fdf9f352797655161c58b75c656a6cc2716dcb66372da835542e1df",
        pk_rm: "4310ee97d88cc1f088a5576c77ab0cf5c3ac797f3d95139c6c84b5429c59662a",
        sk_rm: "8057991eef8f1f1af18f4a9491d16a1ce333f695d4db8e38da75975c4478e0fb",
        psk: None,
        encryptions: &[
            (
                0,
                "1c5250d8034ec2b784ba2cfd69dbdb8af406cfe3ff938e131f0def8c8b60b4db
                 21993c62ce81883d2dd1b51a28",
            ),
            (
                1,
                "6b53c051e4199c518de79594e1c4ab18b96f081549d45ce015be002090bb119e
                 85285337cc95ba5f59992dc98c",
            ),
            (
                2,
                "71146bd6795ccc9c49ce25dda112a48f202ad220559502cef1f34271e0cb4b02
                 b4f10ecac6f48c32f878fae86b",
            ),
            (
                4,
                "63357a2aa291f5a4e5f27db6baa2af8cf77427c7c1a909e0b37214dd47db122b
                 b153495ff0b02e9e54a50dbe16",
            ),
            (
                255,
                "18ab939d63ddec9f6ac2b60d61d36a7375d2070c9b683861110757062c52b888
                   0a5f6b3936da9cd6c23ef2a95c",
            ),
            (
                256,
                "7a4a13e9ef23978e2c520fd4d2e757514ae160cd0cd05e556ef692370ca53076
                   214c0c40d4c728d6ed9e727a5b",
            ),
        ],
        exports: &[
            (
                "",
                "4bbd6243b8bb54cec311fac9df81841b6fd61f56538a775e7c80a9f40160606e",
            ),
            (
                "00",
                "8c1df14732580e5501b00f82b10a1647b40713191b7c1240ac80e2b68808ba69",
            ),
            (
                "54657374436f6e74657874",
                "5acb09211139c43b3090489a9da433e8a30ee7188ba8b0a9a1ccf0c229283e53",
            ),
        ],
    });
}

#[test]
fn rfc9180_a_2_2_psk_x25519_sha256_chacha20poly1305() {
    run_hpke_vector(&HpkeVector {
        ikm_e: "35706a0b09fb26fb45c39c2f5079c709c7cf98e43afa973f14d88ece7e29c2e3",
        pk_em: "2261299c3f40a9afc133b969a97f05e95be2c514e54f3de26cbe5644ac735b04",
        sk_em: "0c35fdf49df7aa01cd330049332c40411ebba36e0c718ebc3edf5845795f6321",
        ikm_r: "26b923eade72941c8a85b09986cdfa3f1296852261adedc52d58d2930269812b",
        pk_rm: "13640af826b722fc04feaa4de2f28fbd5ecc03623b317834e7ff4120dbe73062",
        sk_rm: "77d114e0212be51cb1d76fa99dd41cfd4d0166b08caa09074430a6c59ef17879",
        psk: Some((
            "0247fd33b913760fa1fa51e1892d9f307fbe65eb171e8132c2af18555a738b82",
            "456e6e796e20447572696e206172616e204d6f726961",
        )),
        encryptions: &[
            (
                0,
                "4a177f9c0d6f15cfdf533fb65bf84aecdc6ab16b8b85b4cf65a370e07fc1d78d
                 28fb073214525276f4a89608ff",
            ),
            (
                1,
                "5c3cabae2f0b3e124d8d864c116fd8f20f3f56fda988c3573b40b09997fd6c76
                 9e77c8eda6cda4f947f5b704a8",
            ),
            (
                2,
                "14958900b44bdae9cbe5a528bf933c5c990dbb8e282e6e495adf8205d19da9eb
                 270e3a6f1e0613ab7e757962a4",
            ),
            (
                4,
                "c2a7bc09ddb853cf2effb6e8d058e346f7fe0fb3476528c80db6b698415c5f8c
                 50b68a9a355609e96d2117f8d3",
            ),
            (
                255,
                "2414d0788e4bc39a59a26d7bd5d78e111c317d44c37bd5a4c2a1235f2ddc2085
                   c487d406490e75210c958724a7",
            ),
            (
                256,
                "c567ae1c3f0f75abe1dd9e4532b422600ed4a6e5b9484dafb1e43ab9f5fd662b
                   28c00e2e81d3cde955dae7e218",
            ),
        ],
        exports: &[
            (
                "",
                "813c1bfc516c99076ae0f466671f0ba5ff244a41699f7b2417e4c59d46d39f40",
            ),
            (
                "00",
                "2745cf3d5bb65c333658732954ee7af49eb895ce77f8022873a62a13c94cb4e1",
            ),
            (
                "54657374436f6e74657874",
                "ad40e3ae14f21c99bfdebc20ae14ab86f4ca2dc9a4799d200f43a25f99fa78ae",
            ),
        ],
    });
}

#[test]
fn rfc9180_psk_mode_refuses_a_wrong_psk() {
    type K = X25519HkdfSha256;
    let (sk_r, pk_r) = derive_x25519_keypair(&unhex(
        "26b923eade72941c8a85b09986cdfa3f1296852261adedc52d58d2930269812b",
    ));
    let pk = <K as Kem>::PublicKey::from_bytes(&pk_r).unwrap();
    let sk = <K as Kem>::PrivateKey::from_bytes(&sk_r).unwrap();
    let psk = [7u8; 32];
    let mut rng = FixedRng::new(&[9u8; 32]);
    let (enc, ct) = hpke::single_shot_seal_with_rng::<HpkeChaCha, HkdfSha256, K>(
        &OpModeS::Psk(PskBundle::new(&psk, b"id").unwrap()),
        &pk,
        b"info",
        b"secret",
        b"",
        &mut rng,
    )
    .unwrap();
    let wrong = [8u8; 32];
    assert!(
        hpke::single_shot_open::<HpkeChaCha, HkdfSha256, K>(
            &OpModeR::Psk(PskBundle::new(&wrong, b"id").unwrap()),
            &sk,
            &enc,
            b"info",
            &ct,
            b"",
        )
        .is_err()
    );
    assert!(
        hpke::single_shot_open::<HpkeChaCha, HkdfSha256, K>(
            &OpModeR::Base,
            &sk,
            &enc,
            b"info",
            &ct,
            b"",
        )
        .is_err()
    );
}
