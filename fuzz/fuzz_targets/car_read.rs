//! Reads arbitrary bytes as a CAR v1. Reading may fail, but must not panic;
//! the slice and streaming readers must agree; and an accepted CAR must
//! survive writing and reading back unchanged.

#![no_main]

use gelstore::repo::car::{Car, CarLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let slice = Car::from_slice(data);
    let stream = Car::from_reader(data, CarLimits::default());
    let (car, streamed) = match (slice, stream) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(_), Err(_)) => return,
        (a, b) => panic!("slice and stream readers disagree: {a:?} vs {b:?}"),
    };
    assert_eq!(
        car, streamed,
        "slice and stream readers read different CARs"
    );
    let bytes = car.to_vec().expect("an accepted CAR must be writable");
    let again = Car::from_slice(&bytes).expect("a written CAR must read back");
    assert_eq!(again, car, "write/read round trip changed the CAR");
});
