# tlslib.sh - certificates for the TLS tests, made with openssl req/x509
# (sourced after lib.sh):
#   . "${ZP_TESTLIB%/*}/tlslib.sh" || exit 1
# In $C: two CAs (ca, ca2), a server certificate for localhost and
# 127.0.0.1 (srv), a client one (cli, "/CN=shipper 1/O=Test Org"), one
# of ca2 (other), an expired one of ca (old); each NAME.pem and NAME.key.

command -v openssl >/dev/null || skip "openssl is not installed"

C=$T/certs
mkdir -p "$C"

# cert NAME CA SUBJECT DAYS [EXT]: a P-256 key and a certificate signed
# by CA (a directory-less name in $C), valid for DAYS (-1: expired).
cert() {
	local name=$1 ca=$2 subj=$3 days=$4 ext=${5:-}
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	    -keyout "$C/$name.key" -out "$C/$name.csr" -subj "$subj" \
	    2>"$C/err" || fail "openssl req $name: $(cat "$C/err")"
	if [ -n "$ext" ]; then
		printf '%s\n' "$ext" >"$C/$name.ext"
		ext=(-extfile "$C/$name.ext")
	else
		ext=()
	fi
	openssl x509 -req -in "$C/$name.csr" -CA "$C/$ca.pem" \
	    -CAkey "$C/$ca.key" -CAcreateserial -out "$C/$name.pem" \
	    -days "$days" "${ext[@]}" 2>"$C/err" ||
		fail "openssl x509 $name: $(cat "$C/err")"
}
for ca in ca ca2; do
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	    -keyout "$C/$ca.key" -out "$C/$ca.pem" -days 30 \
	    -subj "/CN=zproxy test $ca" 2>"$C/err" ||
		fail "openssl req $ca: $(cat "$C/err")"
done
cert srv ca /CN=localhost 30 "subjectAltName=DNS:localhost,IP:127.0.0.1"
cert cli ca "/CN=shipper 1/O=Test Org" 30
cert other ca2 "/CN=shipper 2" 30
cert old ca "/CN=shipper 3" -1
