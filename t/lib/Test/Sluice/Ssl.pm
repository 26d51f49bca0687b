package Test::Sluice::Ssl;

# What the TLS tests share: skipping when the tools are missing, and the
# openssl command run in the test's directory (keys and certificates are
# made at test time, never committed).

use warnings;
use strict;

use Test::More;

use Exporter qw/import/;
our @EXPORT_OK = qw/need_openssl need_ssl_client openssl_in read_to_end
	ec_ca_in ec_signed_in/;

# Skips the whole file without the openssl command.
sub need_openssl {
	`openssl version 2>&1` =~ /^OpenSSL/ or plan(skip_all => 'no openssl command');
}

# Skips the whole file without IO::Socket::SSL or the openssl command.
sub need_ssl_client {
	eval { require IO::Socket::SSL; IO::Socket::SSL->import(); 1 }
		or plan(skip_all => 'IO::Socket::SSL not installed');
	need_openssl();
}

# Runs `openssl ARGS` in DIR; dies if it fails.
sub openssl_in {
	my ($dir, $args) = @_;
	system("cd $dir && openssl $args >/dev/null 2>&1") == 0
		or die "openssl $args failed\n";
}

# A self-signed P-256 CA in DIR: NAME.key and NAME.crt, subject /CN=NAME.
sub ec_ca_in {
	my ($dir, $name) = @_;
	openssl_in($dir, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		. "-keyout $name.key -out $name.crt -days 3 -subj /CN=$name "
		. "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign");
}

# A P-256 certificate in DIR for /CN=NAME, signed by the CA BY (its .crt
# and .key there), with the extensions in the file EXT.
sub ec_signed_in {
	my ($dir, $name, $by, $ext) = @_;
	openssl_in($dir, "req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		. "-keyout $name.key -out $name.csr -subj /CN=$name");
	openssl_in($dir, "x509 -req -in $name.csr -CA $by.crt -CAkey $by.key -CAcreateserial "
		. "-days 3 -extfile $ext -out $name.crt");
}

# Reads from the socket until the peer closes or SECS pass; what came.
sub read_to_end {
	my ($s, $secs) = @_;
	my $r = '';
	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm($secs);
		while (1) {
			my $n = $s->sysread(my $buf, 65536);
			last unless $n;
			$r .= $buf;
		}
		alarm(0);
	};
	alarm(0);
	return $r;
}

1;
