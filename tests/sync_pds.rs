//! Sync against the real reference PDS (tests/pds, see tests/common_pds).

mod common_pds;

use common_pds::Pds;

#[test]
fn pds_harness_starts_on_loopback() {
    let pds = Pds::start();
    assert!(
        pds.service.starts_with("http://127.0.0.1:"),
        "{}",
        pds.service
    );
    assert!(pds.plc.starts_with("http://127.0.0.1:"), "{}", pds.plc);
    assert!(pds.did.starts_with("did:plc:"), "{}", pds.did);
    let addr = pds.service.trim_start_matches("http://");
    std::net::TcpStream::connect(addr).expect("the PDS accepts connections");
}
